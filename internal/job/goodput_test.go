package job

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/telemetry"
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
	g := computeGoodput(t0, at(182), attempts, nil)
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
	g := computeGoodput(t0, t0.Add(time.Minute), []launch.AttemptSteps{{Start: t0, End: t0.Add(time.Minute), Ranks: []launch.RankSteps{{Node: "n0"}}}}, nil)
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
	}, nil)
	if len(got) != 1 || got[0].Rank != 2 || got[0].Attempt != 1 || math.Abs(got[0].Ratio-2) > 0.01 || got[0].GPU != nil {
		t.Errorf("stragglers %+v, want rank 2 of attempt 1 at 2.00x, no GPU without telemetry", got)
	}
}

// TestStragglerTelemetry: where GPU telemetry was on, a step straggler
// says what it saw of the rank's GPU in that attempt beside the other
// ranks' GPUs: SM busy, power, the clock-event reasons of a quarter of
// its samples or more; samples of another attempt do not count, and a
// rank no sample named gets nothing.
func TestStragglerTelemetry(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	use := telemetry.NewRankUse()
	for i := range 8 {
		var slow []string
		if i < 6 {
			slow = []string{"sw_power_cap"}
		}
		if i == 0 {
			slow = append(slow, "hw_slowdown")
		}
		use.Observe(telemetry.Sample{Node: "n1", GPU: 3, Ranks: []int{2}, Attempt: 1, SMPct: f(40), PowerW: f(210), ClockReasons: slow})
		use.Observe(telemetry.Sample{Node: "n0", GPU: 0, Ranks: []int{0}, Attempt: 1, SMPct: f(96), PowerW: f(690)})
		use.Observe(telemetry.Sample{Node: "n0", GPU: 1, Ranks: []int{1}, Attempt: 1, SMPct: f(98), PowerW: f(695)})
		use.Observe(telemetry.Sample{Node: "n1", GPU: 3, Ranks: []int{2}, Attempt: 2, SMPct: f(99)}) // another attempt
	}
	r := func(node string, rank int, med time.Duration) launch.RankSteps {
		return launch.RankSteps{Node: node, Rank: rank, Steps: 50, Median: med}
	}
	g := Goodput{Stragglers: findStragglers([]launch.AttemptSteps{
		{Attempt: 0, Ranks: []launch.RankSteps{r("n0", 0, 100*time.Millisecond), r("n0", 1, 100*time.Millisecond), r("n1", 2, 200*time.Millisecond), r("n1", 3, 300*time.Millisecond)}},
	}, use.Get)}
	if len(g.Stragglers) != 2 {
		t.Fatalf("stragglers %+v, want ranks 2 and 3", g.Stragglers)
	}
	gpu := g.Stragglers[0].GPU
	if gpu == nil || gpu.Node != "n1" || gpu.GPU != 3 || gpu.Samples != 8 || *gpu.SMPct != 40 || *gpu.OthersSMPct != 97 || *gpu.PowerW != 210 ||
		strings.Join(gpu.ClockReasons, ",") != "sw_power_cap" {
		t.Errorf("rank 2's GPU %+v", gpu)
	}
	lines := g.StragglerLines()
	if want := "; its GPU (n1 GPU 3, 8 samples): SM busy 40% (the others' 97%), 210 W, clocks held by sw_power_cap"; !strings.HasSuffix(lines[0], want) {
		t.Errorf("line %q, want it to end %q", lines[0], want)
	}
	if g.Stragglers[1].GPU != nil || strings.Contains(lines[1], "its GPU") {
		t.Errorf("rank 3, no sample of it: %+v, %q", g.Stragglers[1].GPU, lines[1])
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
