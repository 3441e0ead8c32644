package launch

import (
	"context"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestStepCounting: steps counted across a bar's frames (jumps of several
// steps), an epoch's bar beginning again, and repeats; step times from
// the gaps.
func TestStepCounting(t *testing.T) {
	tr := newStepTrack(nil, nil)
	at := time.Unix(1000, 0)
	feed := func(d time.Duration, n int64) {
		at = at.Add(d)
		tr.step(n, at)
	}
	feed(0, 1)                      // "Epoch 0:   0%| | 1/10"
	feed(time.Second, 3)            // 2 steps in 1 s: 500 ms each
	feed(0, 3)                      // a repeat
	feed(3500*time.Millisecond, 10) // 7 in 3.5 s
	feed(time.Second, 2)            // a new bar ("Epoch 1: 2/10"): 2 more
	r := tr.result("n", rankIDs{local: 1, global: 5})
	if r.Steps != 12 || r.LastStep != 2 || r.Median != 500*time.Millisecond || r.Rank != 5 {
		t.Errorf("got %+v, want 12 steps, last 2, median 500ms, rank 5", r)
	}
	if !r.First.Equal(time.Unix(1000, 0)) || !r.Last.Equal(at) {
		t.Errorf("first %v last %v", r.First, r.Last)
	}
}

// TestStepCounter: the run's count is each attempt's most advanced
// worker's, the attempts before added, so it only grows.
func TestStepCounter(t *testing.T) {
	c := &stepCounter{}
	a, b := newStepTrack(c, nil), newStepTrack(c, nil)
	at := time.Unix(1000, 0)
	a.step(1, at)
	a.step(5, at.Add(time.Second))
	b.step(1, at)
	b.step(3, at.Add(time.Second))
	if got := c.total(); got != 5 {
		t.Fatalf("attempt 1: %d steps, want 5 (the most advanced worker's)", got)
	}
	c.attemptEnded()
	next := newStepTrack(c, nil)
	next.step(1, at)
	next.step(2, at.Add(time.Second))
	if got := c.total(); got != 7 {
		t.Errorf("after attempt 2's 2 steps: %d, want 7", got)
	}
}

// TestRunCheckpointTouched: a worker's checkpoint (wire.FrameCheckpoint:
// a touch of $GORUN_CHECKPOINT_FILE or a line its supervisor recognised)
// and its steps (wire.FrameStep) count at the time each happened, its
// frame's time less the age it gives; a worker that told none has none.
func TestRunCheckpointTouched(t *testing.T) {
	// touched 20 ms before its frame; step 7 written 5 ms before its own
	checkpoint := wire.AppendFrame(nil, wire.FrameCheckpoint, append(wire.AppendRank(nil, 0), "20000000"...))
	step := wire.AppendFrame(nil, wire.FrameStep, append(wire.AppendRank(nil, 0), "7 5000000"...))
	c := &cluster{plan: [][]script{{{frames: []timedFrame{
		{0, started(0, 0)}, {0, started(1, 1)},
		{30 * ms, checkpoint}, {0, step},
		{30 * ms, exited(0, 0, 0, 0, false, time.Now())}, {0, exited(1, 1, 0, 0, false, time.Now())},
	}, after: 100 * ms}}}}
	begin := time.Now()
	res, err := Run(context.Background(), Options{Attempt: c.attempt})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 1 || len(res.Steps[0].Ranks) != 2 {
		t.Fatalf("steps: %+v", res.Steps)
	}
	for _, r := range res.Steps[0].Ranks {
		switch {
		case r.LocalRank == 0 && (r.Checkpoint.Before(begin) || r.Checkpoint.After(begin.Add(25*ms))):
			t.Errorf("rank 0's checkpoint at %v after the start, want about 10 ms (its frame at 30 ms, touched 20 ms before)", r.Checkpoint.Sub(begin))
		case r.LocalRank == 0 && (r.LastStep != 7 || r.Last.Before(begin.Add(20*ms)) || r.Last.After(begin.Add(40*ms))):
			t.Errorf("rank 0's step %d at %v after the start, want 7 at about 25 ms", r.LastStep, r.Last.Sub(begin))
		case r.LocalRank == 1 && (!r.Checkpoint.IsZero() || r.Steps != 0):
			t.Errorf("rank 1 told nothing, yet has a checkpoint at %v, %d steps", r.Checkpoint, r.Steps)
		}
	}
}
