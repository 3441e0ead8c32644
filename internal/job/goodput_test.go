package job

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/launch"
)

// TestGoodputSchedule: a known schedule, second by second: preflight
// 0-10; attempt 1 starts 10, first step 20, checkpoint 60, last step 70,
// fails 75; attempt 2 starts 76, first step 90, last step 150, hangs,
// caught 180; the run ends 182. Every part is where the schedule puts it,
// and the parts add up to the wall time.
func TestGoodputSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rank := func(first, last, ckpt float64) launch.RankSteps {
		r := launch.RankSteps{Node: "n0", Steps: 10, LastStep: 10, First: at(first), Last: at(last)}
		if ckpt > 0 {
			r.Checkpoint = at(ckpt)
		}
		return r
	}
	attempts := []launch.AttemptSteps{
		{Attempt: 0, Start: at(10), Failed: at(75), End: at(75.5), Ranks: []launch.RankSteps{rank(20, 70, 60), rank(21, 69, 0)}},
		{Attempt: 1, Start: at(76), Failed: at(180), End: at(181), Hang: true, Ranks: []launch.RankSteps{rank(90, 150, 0), rank(91, 149, 0)}},
	}
	g := computeGoodput(t0, at(182), attempts)
	want := map[string]float64{"preflight": 10, "startup": 10, "productive": 40 + 60, "lost_progress": 15, "restart": 15, "hang": 30, "end": 2}
	got := map[string]float64{}
	sum := 0.0
	for _, p := range g.Parts {
		got[p.Key] = p.Seconds
		sum += p.Seconds
	}
	for k, w := range want {
		if math.Abs(got[k]-w) > 1e-6 {
			t.Errorf("%s: %.3f s, want %.0f", k, got[k], w)
		}
	}
	if math.Abs(sum-182) > 1e-6 || got["other"] > 1e-6 {
		t.Errorf("parts add up to %.3f s (other %.3f), want 182", sum, got["other"])
	}
	if !g.Known || !g.CheckpointsKnown || math.Abs(g.Goodput-100.0/182) > 1e-9 {
		t.Errorf("known %v, checkpoints %v, goodput %.4f, want %.4f", g.Known, g.CheckpointsKnown, g.Goodput, 100.0/182)
	}
	line := g.Line()
	for _, w := range []string{"gorun: goodput 54.9% of 3m2s: ", "preflight 5.5%", "start-up 5.5%", "lost progress 8.2%", "restarts 8.2%", "hang 16.5%", "end 1.1%"} {
		if !strings.Contains(line, w) {
			t.Errorf("line %q lacks %q", line, w)
		}
	}
}

// TestGoodputUnknown: no step recognised: unknown, and said so.
func TestGoodputUnknown(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	g := computeGoodput(t0, t0.Add(time.Minute), []launch.AttemptSteps{{Start: t0, End: t0.Add(time.Minute), Ranks: []launch.RankSteps{{Node: "n0"}}}})
	if g.Known || len(g.Parts) != 0 || !strings.Contains(g.Line(), "goodput unknown: no training step was recognised") {
		t.Errorf("got %+v, line %q", g, g.Line())
	}
}

// TestStragglers: a rank at 2x the others' step time is named with its
// ratio; a balanced attempt, or ranks with too few steps, name none.
func TestStragglers(t *testing.T) {
	r := func(rank int, med time.Duration, steps int64) launch.RankSteps {
		return launch.RankSteps{Node: "n0", Rank: rank, Steps: steps, Median: med}
	}
	got := findStragglers([]launch.AttemptSteps{
		{Attempt: 0, Ranks: []launch.RankSteps{r(0, 100*time.Millisecond, 50), r(1, 104*time.Millisecond, 50), r(2, 200*time.Millisecond, 50), r(3, 98*time.Millisecond, 50)}},
		{Attempt: 1, Ranks: []launch.RankSteps{r(0, 100*time.Millisecond, 50), r(1, 120*time.Millisecond, 50)}},
		{Attempt: 2, Ranks: []launch.RankSteps{r(0, 100*time.Millisecond, 50), r(1, 900*time.Millisecond, 5)}},
	})
	if len(got) != 1 || got[0].Rank != 2 || got[0].Attempt != 1 || math.Abs(got[0].Ratio-2) > 0.01 {
		t.Errorf("stragglers %+v, want rank 2 of attempt 1 at 2.00x", got)
	}
}

// TestGoodputChain: the runs of one Slurm job (a requeue) add up, each
// run once; a run alone has no chain line.
func TestGoodputChain(t *testing.T) {
	dir := t.TempDir()
	env := func(k string) string { return map[string]string{"SLURM_JOB_ID": "4242"}[k] }
	key := chainKey(env, "none", false)
	if key != "slurm-4242" || chainKey(func(string) string { return "" }, "job7", true) != "rdzv-job7" || chainKey(nil, "none", false) != "" {
		t.Fatalf("chain keys: %q", key)
	}
	g := func(wall, prod float64) Goodput {
		return Goodput{Known: true, WallSeconds: wall, Parts: []GoodputPart{{Key: "productive", Seconds: prod}, {Key: "restart", Seconds: wall - prod}}}
	}
	c, err := addToChain(dir, key, "run1", g(100, 80))
	if err != nil || c.Runs != 1 || c.Line() != "" {
		t.Fatalf("first run: %+v, %v", c, err)
	}
	if c, err = addToChain(dir, key, "run2", g(50, 20)); err != nil || c.Runs != 2 || math.Abs(c.Goodput-100.0/150) > 1e-9 || c.WallSeconds != 150 {
		t.Fatalf("second run: %+v, %v", c, err)
	}
	if !strings.Contains(c.Line(), "goodput of the 2 runs of slurm-4242 so far: 66.7% of 150s") {
		t.Errorf("line %q", c.Line())
	}
}
