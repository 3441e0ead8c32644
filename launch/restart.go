package launch

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// backoff is the pause before restart n (1 first) after a failure that
// lost a node (lost) or not: the first restart after a worker's failure
// starts at once, since a fresh master port (the caller's) and a fresh
// torchrun leave nothing of the old attempt to wait for; then the pause
// doubles from opts.Backoff, capped at opts.BackoffMax.
func backoff(opts Options, n int, lost bool) time.Duration {
	if opts.Backoff <= 0 {
		return 0
	}
	steps := n - 2 // restart 2 waits Backoff
	if lost {
		steps = n - 1 // a lost node gets Backoff from the first restart
	}
	if steps < 0 {
		return 0
	}
	d := opts.Backoff
	for i := 0; i < steps; i++ {
		d *= 2
		if opts.BackoffMax > 0 && d >= opts.BackoffMax {
			return opts.BackoffMax
		}
	}
	if opts.BackoffMax > 0 && d > opts.BackoffMax {
		return opts.BackoffMax
	}
	return d
}

// Milestone is one point a restart's timeline reached, as an offset
// from the moment the failure was seen.
type Milestone struct {
	Key  string // stable, for tools: "stopped", "gpu_memory_free", ...
	Name string // as printed: "stopped", "GPU memory free", ...
	At   time.Duration
}

// Milestones lists the milestones the restart reached, in order:
// stopped, GPU memory free, nodes rechecked, next torchrun handed its
// command line, workers started, first line; handed ahead (Ahead), the hand-off comes
// first, at a negative offset when it came before the failure, and
// workers released before workers started (one not reached, or not
// checked, is left out).
func (r Restart) Milestones() []Milestone {
	handed := Milestone{"next_torchrun_handed", "next torchrun handed its command line", r.Handed}
	all := []Milestone{{"stopped", "stopped", r.Stopped}, {"gpu_memory_free", "GPU memory free", r.GPUFree},
		{"nodes_rechecked", "nodes rechecked", r.Checked}, handed, {"workers_released", "workers released", r.Released},
		{"workers_started", "workers started", r.WorkersUp}, {"first_line", "first line", r.FirstLine}}
	if r.Ahead > 0 {
		all = append([]Milestone{handed}, slices.Delete(all, 3, 4)...)
	}
	out := all[:0]
	for _, m := range all {
		if m.At > 0 || (m.At < 0 && m.Name == handed.Name) {
			out = append(out, m)
		}
	}
	return out
}

// Longest names the stretch between two milestones that took longest,
// "failure seen → stopped" say, and how long it took; "" when no
// milestone was reached. A hand-off before the failure is no stretch of
// the restart.
func (r Restart) Longest() (string, time.Duration) {
	longest, prev, from := "", time.Duration(0), "failure seen"
	var longestD time.Duration
	for _, p := range r.Milestones() {
		if p.At < 0 {
			continue
		}
		if d := p.At - prev; d > longestD {
			longest, longestD = from+" → "+p.Name, d
		}
		prev, from = p.At, p.Name
	}
	return longest, longestD
}

// String is the restart's timeline as one line, with the stretch that
// took longest.
func (r Restart) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gorun: restart after attempt %d: failure seen", r.Attempt+1)
	for _, p := range r.Milestones() {
		if p.At < 0 {
			fmt.Fprintf(&b, ", %s %s before", p.Name, ShortDuration(-p.At))
		} else {
			fmt.Fprintf(&b, ", %s +%s", p.Name, ShortDuration(p.At))
		}
		if p.Name == "next torchrun handed its command line" {
			var how []string
			if r.Ahead > 0 {
				how = append(how, fmt.Sprintf("ahead on %d of %d nodes", r.AheadUsed, r.Nodes))
				if unused := r.Ahead - r.AheadUsed; unused > 0 {
					how = append(how, fmt.Sprintf("%s handed ahead then stopped unused", plural(unused, "job")))
				}
			}
			if r.Warm > 0 {
				how = append(how, fmt.Sprintf("warm on %d of %d nodes", r.Warm, r.Nodes))
			}
			if len(how) > 0 {
				fmt.Fprintf(&b, " (%s)", strings.Join(how, ", "))
			}
		}
		if p.Name == "workers started" && r.Workers > 0 {
			fmt.Fprintf(&b, " (%d of %d pooled)", r.Pooled, r.Workers)
		}
	}
	if longest, d := r.Longest(); longest != "" {
		fmt.Fprintf(&b, "; longest: %s (%s)", longest, ShortDuration(d))
	}
	return b.String()
}

// ShortDuration writes d as gorun's restart lines do: whole milliseconds
// under 10 s ("461ms"), else to a tenth of a second ("12.3s").
func ShortDuration(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.Round(100 * time.Millisecond).String()
}
