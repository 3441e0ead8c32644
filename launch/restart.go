package launch

import (
	"fmt"
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

// String is the restart's timeline as one line, with the phase that took
// longest.
func (r Restart) String() string {
	type phase struct {
		name string
		at   time.Duration
	}
	phases := []phase{{"stopped", r.Stopped}, {"GPU memory free", r.GPUFree}, {"nodes rechecked", r.Checked}, {"next torchrun handed its command line", r.Handed},
		{"workers started", r.WorkersUp}, {"first line", r.FirstLine}}
	var b strings.Builder
	fmt.Fprintf(&b, "gorun: restart after attempt %d: failure seen", r.Attempt+1)
	longest, prev, from := "", time.Duration(0), "failure seen"
	var longestD time.Duration
	for _, p := range phases {
		if p.at <= 0 {
			continue
		}
		fmt.Fprintf(&b, ", %s +%s", p.name, ShortDuration(p.at))
		if p.name == "next torchrun handed its command line" && r.Warm > 0 {
			fmt.Fprintf(&b, " (warm on %d of %d nodes)", r.Warm, r.Nodes)
		}
		if p.name == "workers started" && r.Workers > 0 {
			fmt.Fprintf(&b, " (%d of %d pooled)", r.Pooled, r.Workers)
		}
		if d := p.at - prev; d > longestD {
			longest, longestD = from+" → "+p.name, d
		}
		prev, from = p.at, p.name
	}
	if longest != "" {
		fmt.Fprintf(&b, "; longest: %s (%s)", longest, ShortDuration(longestD))
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
