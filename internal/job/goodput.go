package job

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/telemetry"
)

// Goodput is where the run's wall time went, from gorun's start to its
// end, read from the outside: the training steps and checkpoints the
// workers printed (launch.Steps recognises them), each attempt's start,
// failure and end. Productive time is from an attempt's first step to
// its last; the rest is badput, by cause.
type Goodput struct {
	// Known is false when no step was recognised in any worker's output:
	// then nothing else is computed (Why says so), and no figure is made up.
	Known bool   `json:"known"`
	Why   string `json:"why,omitempty"`
	// WallSeconds is gorun's start to its end; Goodput the productive
	// share of it (0 to 1).
	WallSeconds float64 `json:"wall_seconds"`
	Goodput     float64 `json:"goodput"`
	// Parts add up to WallSeconds, each with a stable key: preflight,
	// startup, productive, lost_progress, restart, hang, end, other.
	Parts []GoodputPart `json:"parts"`
	// CheckpointsKnown: a checkpoint was recognised, so the progress a
	// failure lost (lost_progress) is from the attempt's last checkpoint;
	// without one, lost_progress holds only the part of a step the
	// failure cut, and what it undid counts as productive.
	CheckpointsKnown bool `json:"checkpoints_known"`
	// Steps is every attempt's steps, every rank's.
	Steps []AttemptStepsSummary `json:"steps"`
	// Chain adds up the runs of this job a scheduler started again (a
	// Slurm requeue, the same --rdzv-id) so far; null for a run alone.
	Chain *ChainGoodput `json:"chain"`
	// Stragglers are the ranks whose median step time was more than
	// stragglerRatio times the median of the other ranks' medians, in an
	// attempt where at least two ranks printed minSteps steps or more.
	Stragglers []Straggler `json:"stragglers"`
}

// Straggler is a rank whose steps lagged the others'.
type Straggler struct {
	Attempt  int     `json:"attempt"` // from 1
	Node     string  `json:"node"`
	Rank     int     `json:"rank"`
	MedianMS float64 `json:"step_median_ms"`
	OthersMS float64 `json:"others_median_ms"`
	Ratio    float64 `json:"ratio"`
	// GPU is what GPU telemetry saw of its GPU in that attempt (null:
	// telemetry off, or no sample named the rank).
	GPU *StragglerGPU `json:"gpu"`
}

// StragglerGPU is what GPU telemetry saw of a straggler's GPU over its
// attempt, beside the other ranks' GPUs.
type StragglerGPU struct {
	Node    string `json:"node"`
	GPU     int    `json:"gpu"` // NVML index
	Samples int    `json:"samples"`
	// SMPct is the mean of its utilization samples; OthersSMPct the mean
	// of the other timed ranks' means (null: not reported).
	SMPct       *float64 `json:"sm_pct"`
	OthersSMPct *float64 `json:"others_sm_pct"`
	PowerW      *float64 `json:"power_w"` // the mean of its power samples
	// ClockReasons are the clock-event reasons active in at least a
	// quarter of its samples, most frequent first.
	ClockReasons []string `json:"clock_reasons"`
}

// gpuSaw is what GPU telemetry saw of a rank's GPU in an attempt (from
// 1); nil, or false, where telemetry is off or saw nothing of it.
type gpuSaw func(attempt, rank int) (telemetry.Use, bool)

// Straggler thresholds: a rank is named when its median step time is
// more than stragglerRatio times the others' (the median of their
// medians), each with minSteps steps at least.
const (
	stragglerRatio = 1.25
	minSteps       = 10
)

// findStragglers names, per attempt, the ranks whose steps lagged.
func findStragglers(attempts []launch.AttemptSteps, saw gpuSaw) []Straggler {
	out := []Straggler{}
	for _, a := range attempts {
		var timed []launch.RankSteps
		for _, r := range a.Ranks {
			if r.Steps >= minSteps && r.Median > 0 {
				timed = append(timed, r)
			}
		}
		if len(timed) < 2 {
			continue
		}
		for i, r := range timed {
			var others []time.Duration
			for j, o := range timed {
				if j != i {
					others = append(others, o.Median)
				}
			}
			slices.Sort(others)
			om := others[len(others)/2]
			if len(others)%2 == 0 {
				om = (others[len(others)/2-1] + others[len(others)/2]) / 2
			}
			if ratio := float64(r.Median) / float64(om); ratio > stragglerRatio {
				out = append(out, Straggler{Attempt: a.Attempt + 1, Node: r.Node, Rank: r.Rank, MedianMS: ms(r.Median), OthersMS: ms(om), Ratio: ratio,
					GPU: stragglerGPU(saw, a.Attempt+1, r.Rank, timed)})
			}
		}
	}
	return out
}

// stragglerGPU is what telemetry saw of rank's GPU in attempt, beside
// the GPUs of the other ranks in timed; nil where it saw nothing of it.
func stragglerGPU(saw gpuSaw, attempt, rank int, timed []launch.RankSteps) *StragglerGPU {
	if saw == nil {
		return nil
	}
	u, ok := saw(attempt, rank)
	if !ok {
		return nil
	}
	g := &StragglerGPU{Node: u.Node, GPU: u.GPU, Samples: u.Samples, ClockReasons: u.ReasonsIn(0.25)}
	if u.HaveSM {
		g.SMPct = &u.SMPct
	}
	if u.HavePower {
		g.PowerW = &u.PowerW
	}
	var sum float64
	n := 0
	for _, o := range timed {
		if o.Rank == rank {
			continue
		}
		if ou, ok := saw(attempt, o.Rank); ok && ou.HaveSM {
			sum += ou.SMPct
			n++
		}
	}
	if n > 0 {
		others := sum / float64(n)
		g.OthersSMPct = &others
	}
	return g
}

// StragglerLines says each straggler, a line each, with what GPU
// telemetry saw of its GPU where it was on.
func (g Goodput) StragglerLines() []string {
	var out []string
	for _, s := range g.Stragglers {
		line := fmt.Sprintf("gorun: straggler: %s rank %d (attempt %d): step time %.0f ms (median), %.2fx the other ranks' %.0f ms",
			s.Node, s.Rank, s.Attempt, s.MedianMS, s.Ratio, s.OthersMS)
		if gpu := s.GPU; gpu != nil {
			var saw []string
			if gpu.SMPct != nil {
				sm := fmt.Sprintf("SM busy %.0f%%", *gpu.SMPct)
				if gpu.OthersSMPct != nil {
					sm += fmt.Sprintf(" (the others' %.0f%%)", *gpu.OthersSMPct)
				}
				saw = append(saw, sm)
			}
			if gpu.PowerW != nil {
				saw = append(saw, fmt.Sprintf("%.0f W", *gpu.PowerW))
			}
			if len(gpu.ClockReasons) > 0 {
				saw = append(saw, "clocks held by "+strings.Join(gpu.ClockReasons, ", "))
			}
			if len(saw) > 0 {
				line += fmt.Sprintf("; its GPU (%s GPU %d, %d samples): %s", gpu.Node, gpu.GPU, gpu.Samples, strings.Join(saw, ", "))
			}
		}
		out = append(out, line)
	}
	return out
}

// GoodputPart is one share of the wall time.
type GoodputPart struct {
	Key     string  `json:"key"`
	Name    string  `json:"name"` // as printed
	Seconds float64 `json:"seconds"`
	Share   float64 `json:"share"` // of WallSeconds, 0 to 1
}

// AttemptStepsSummary is one attempt's steps.
type AttemptStepsSummary struct {
	Attempt int                `json:"attempt"` // from 1, as printed
	Ranks   []RankStepsSummary `json:"ranks"`
}

// RankStepsSummary is one worker's steps in one attempt.
type RankStepsSummary struct {
	Node      string `json:"node"`
	Rank      int    `json:"rank"`
	LocalRank int    `json:"local_rank"`
	Steps     int64  `json:"steps"`
	LastStep  int64  `json:"last_step"`
	// FirstStepS and LastStepS are seconds from gorun's start (null: no step).
	FirstStepS *float64 `json:"first_step_s"`
	LastStepS  *float64 `json:"last_step_s"`
	MedianMS   float64  `json:"step_median_ms"`
	P90MS      float64  `json:"step_p90_ms"`
	// CheckpointS is its last checkpoint, in seconds from gorun's start
	// (null: none recognised).
	CheckpointS *float64 `json:"checkpoint_s"`
}

// goodputParts are the parts' keys, in order, and their printed names.
func goodputParts() [][2]string {
	return [][2]string{{"preflight", "preflight"}, {"startup", "start-up"}, {"productive", "productive"},
		{"lost_progress", "lost progress"}, {"restart", "restarts"}, {"hang", "hang"}, {"end", "end"}, {"other", "other"}}
}

// computeGoodput reads the run from start to end, attempts in order.
func computeGoodput(start, end time.Time, attempts []launch.AttemptSteps, saw gpuSaw) Goodput {
	g := Goodput{WallSeconds: end.Sub(start).Seconds(), Parts: []GoodputPart{}, Steps: []AttemptStepsSummary{}, Stragglers: []Straggler{}}
	since := func(t time.Time) *float64 {
		if t.IsZero() {
			return nil
		}
		s := t.Sub(start).Seconds()
		return &s
	}
	seen := false
	for _, a := range attempts {
		as := AttemptStepsSummary{Attempt: a.Attempt + 1, Ranks: []RankStepsSummary{}}
		for _, r := range a.Ranks {
			seen = seen || r.Steps > 0
			g.CheckpointsKnown = g.CheckpointsKnown || !r.Checkpoint.IsZero()
			rs := RankStepsSummary{Node: r.Node, Rank: r.Rank, LocalRank: r.LocalRank, Steps: r.Steps, LastStep: r.LastStep,
				MedianMS: ms(r.Median), P90MS: ms(r.P90), CheckpointS: since(r.Checkpoint)}
			if r.Steps > 0 {
				rs.FirstStepS, rs.LastStepS = since(r.First), since(r.Last)
			}
			as.Ranks = append(as.Ranks, rs)
		}
		g.Steps = append(g.Steps, as)
	}
	g.Stragglers = findStragglers(attempts, saw)
	if !seen {
		g.Why = "no training step was recognised in the workers' output (--step-pattern REGEX names one)"
		if len(attempts) == 0 {
			g.Why = "no attempt ran"
		}
		return g
	}
	g.Known = true
	parts := map[string]time.Duration{}
	add := func(key string, from, to time.Time) {
		if !from.IsZero() && to.After(from) {
			parts[key] += to.Sub(from)
		}
	}
	add("preflight", start, attempts[0].Start)
	var prevFail time.Time // the failure before this attempt; zero for the first
	for i, a := range attempts {
		first, last, ckpt := attemptSpan(a)
		stop := a.End // where this attempt's own time ends
		if !a.Failed.IsZero() {
			stop = a.Failed
		}
		lead := "startup" // up to the first step
		from := a.Start
		if i > 0 {
			lead, from = "restart", prevFail // the downtime runs from the failure
		}
		if first.IsZero() { // no step: the whole attempt is its lead-in
			add(lead, from, stop)
		} else {
			add(lead, from, first)
			switch {
			case a.Failed.IsZero(): // it succeeded, or was interrupted
				add("productive", first, last)
			case a.Hang:
				add("productive", first, last)
				add("hang", last, a.Failed)
			case g.CheckpointsKnown:
				kept := later(first, ckpt) // progress since it is lost
				if kept.After(last) {
					kept = last
				}
				add("productive", first, kept)
				add("lost_progress", kept, a.Failed)
			default:
				add("productive", first, last)
				add("lost_progress", last, a.Failed)
			}
			if a.Failed.IsZero() && i == len(attempts)-1 {
				add("end", last, end)
			}
		}
		if !a.Failed.IsZero() {
			prevFail = a.Failed
			if i == len(attempts)-1 {
				add("end", a.Failed, end) // no attempt after it: the stop and the end
			}
		} else if first.IsZero() && i == len(attempts)-1 {
			add("end", stop, end)
		}
	}
	var sum time.Duration
	for _, d := range parts {
		sum += d
	}
	if wall := end.Sub(start); wall > sum {
		parts["other"] = wall - sum
	}
	secs := make(map[string]float64, len(parts))
	for k, d := range parts {
		secs[k] = d.Seconds()
	}
	if _, ok := secs["productive"]; !ok {
		secs["productive"] = 0 // always a part, 0 s where no step ran
	}
	g.Parts, g.Goodput = partsOf(secs, g.WallSeconds)
	return g
}

// partsOf is the parts of wall seconds that secs (seconds by key) say,
// in goodputParts' order, and the productive share.
func partsOf(secs map[string]float64, wall float64) (parts []GoodputPart, productive float64) {
	parts = []GoodputPart{}
	for _, kn := range goodputParts() {
		v, ok := secs[kn[0]]
		if !ok {
			continue
		}
		p := GoodputPart{Key: kn[0], Name: kn[1], Seconds: v}
		if wall > 0 {
			p.Share = v / wall
		}
		parts = append(parts, p)
		if kn[0] == "productive" {
			productive = p.Share
		}
	}
	return parts, productive
}

// attemptSpan is an attempt's first step (any rank's), last step (any
// rank's) and last checkpoint (any rank's); zero times where none.
func attemptSpan(a launch.AttemptSteps) (first, last, ckpt time.Time) {
	for _, r := range a.Ranks {
		if r.Steps > 0 {
			if first.IsZero() || r.First.Before(first) {
				first = r.First
			}
			last = later(last, r.Last)
		}
		ckpt = later(ckpt, r.Checkpoint)
	}
	return first, last, ckpt
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Line is the run's last line: "gorun: goodput 91.2% of 3m12s: start-up
// 2.1%, restarts 4.0%, ...", or why it is not known.
func (g Goodput) Line() string {
	if !g.Known {
		return "gorun: goodput unknown: " + g.Why
	}
	wall := time.Duration(g.WallSeconds * float64(time.Second)).Round(time.Second)
	if wall == 0 {
		wall = time.Duration(g.WallSeconds * float64(time.Second)).Round(time.Millisecond)
	}
	var rest []string
	for _, p := range g.Parts {
		if p.Key != "productive" && p.Share >= 0.0005 {
			rest = append(rest, fmt.Sprintf("%s %.1f%%", p.Name, 100*p.Share))
		}
	}
	line := fmt.Sprintf("gorun: goodput %.1f%% of %s", 100*g.Goodput, wall)
	if len(rest) > 0 {
		line += ": " + strings.Join(rest, ", ")
	}
	if !g.CheckpointsKnown && g.partShare("lost_progress") > 0 {
		line += " (no checkpoint recognised: what a failure undid counts as productive)"
	}
	return line
}

func (g Goodput) partShare(key string) float64 {
	for _, p := range g.Parts {
		if p.Key == key {
			return p.Share
		}
	}
	return 0
}

// goodputLine is the hook that works out the goodput as the run ends,
// adds it to its chain's (chainKey) and prints it; the summary, after it,
// writes what it left in out.
type goodputLine struct {
	start    time.Time
	w        io.Writer
	chain    string // chainKey's; "": none
	cacheDir string // the user's cache ("": none kept)
	runID    string
	out      *goodputResult
	gpu      *gpuWatch // nil: telemetry off
}

// goodputResult is what goodputLine worked out, for the summary.
type goodputResult struct {
	g     Goodput
	chain *ChainGoodput
	done  bool
}

func (*goodputLine) Name() string { return "goodput" }

func (h *goodputLine) Finish(_ context.Context, _ *Attempt, res launch.Result, _ error) error {
	var saw gpuSaw
	if h.gpu != nil {
		saw = h.gpu.rankUse
	}
	g := computeGoodput(h.start, time.Now(), res.Steps, saw)
	for _, l := range g.StragglerLines() {
		fmt.Fprintln(h.w, l)
	}
	fmt.Fprintln(h.w, g.Line())
	var chain *ChainGoodput
	if h.cacheDir != "" {
		var err error
		if chain, err = addToChain(filepath.Join(h.cacheDir, "gorun", "runs"), h.chain, h.runID, g); err != nil {
			fmt.Fprintf(h.w, "gorun: goodput: the figures of this job's earlier runs were not added up: %v\n", err)
		}
		if l := chain.Line(); l != "" {
			fmt.Fprintln(h.w, l)
		}
	}
	if h.out != nil {
		*h.out = goodputResult{g: g, chain: chain, done: true}
	}
	return nil
}
