package launch

import (
	"slices"
	"sync"
	"time"
)

// stepTrack is what one worker's output said of its steps in one attempt,
// as its supervisor on the node read it (internal/stepscan): every step
// that advanced (wire.FrameStep) and every checkpoint (wire.FrameCheckpoint).
type stepTrack struct {
	counter *stepCounter        // the run's; nil: none
	stepped func(now time.Time) // told of every step that advances the count (the attempt's silenceClock); nil: none

	mu         sync.Mutex
	last       int64 // the last step number seen; -1: none yet
	count      int64 // steps counted
	first      time.Time
	lastAt     time.Time
	checkpoint time.Time       // the last checkpoint seen; zero: none
	per        []time.Duration // each counted step's time (a jump of k steps: k samples of 1/k)
	series     []StepPoint     // the count over time, for the report; thinned past maxStepPoints
}

// StepPoint is a worker's step count at a moment.
type StepPoint struct {
	T time.Time
	N int64
}

// maxStepPoints bounds a worker's step series: past it every other point
// goes, so a week-long run keeps a report of bounded size.
const maxStepPoints = 1000

// record adds the count at now to the series. t.mu is held.
func (t *stepTrack) record(now time.Time) {
	t.series = append(t.series, StepPoint{now, t.count})
	if len(t.series) > maxStepPoints {
		last := t.series[len(t.series)-1]
		kept := t.series[:0]
		for i := 0; i < len(t.series); i += 2 {
			kept = append(kept, t.series[i])
		}
		if kept[len(kept)-1] != last {
			kept = append(kept, last)
		}
		t.series = kept
	}
}

// maxStepSamples bounds the step times kept per worker (the latest win).
const maxStepSamples = 4096

func newStepTrack(c *stepCounter, stepped func(time.Time)) *stepTrack {
	return &stepTrack{counter: c, stepped: stepped, last: -1}
}

// stepCounter counts the run's steps for the status line: in each
// attempt, the count of the worker that counted most, the attempts
// before added up, so that the count only grows.
type stepCounter struct {
	mu   sync.Mutex
	base int64 // the attempts before's
	cur  int64 // this attempt's
}

func (c *stepCounter) seen(n int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = max(c.cur, n)
}

func (c *stepCounter) attemptEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base, c.cur = c.base+c.cur, 0
}

func (c *stepCounter) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base + c.cur
}

// checkpointAt records a checkpoint the worker said it saved at now: by
// touching $GORUN_CHECKPOINT_FILE (counted even where steps are not read,
// --step-pattern off), or in a line its supervisor recognised.
func (t *stepTrack) checkpointAt(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checkpoint = now
}

// step counts step n seen at now.
func (t *stepTrack) step(n int64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n != t.last && t.stepped != nil {
		t.stepped(now)
	}
	switch {
	case t.last < 0:
		t.first, t.lastAt, t.last = now, now, n
		t.count = 1
		t.counter.seen(1)
		t.record(now)
		return
	case n == t.last:
		return
	case n > t.last:
		d := n - t.last
		t.count += d
		each := now.Sub(t.lastAt) / time.Duration(d)
		for range min(d, maxStepSamples) {
			t.per = append(t.per, each)
		}
	default: // a new count (an epoch's bar begins again)
		t.count += max(n, 1)
	}
	t.last, t.lastAt = n, now
	t.counter.seen(t.count)
	t.record(now)
	if len(t.per) > maxStepSamples {
		t.per = slices.Delete(t.per, 0, len(t.per)-maxStepSamples)
	}
}

// RankSteps is what a worker's output said of its steps in one attempt.
type RankSteps struct {
	Node      string
	LocalRank int
	Rank      int
	// Steps counted; 0: none recognised (the rest is zero).
	Steps    int64
	LastStep int64     // the last step number the worker printed
	First    time.Time // its first step
	Last     time.Time // its last step
	// Median and P90 are its step time (0 with fewer than two steps).
	Median, P90 time.Duration
	// Checkpoint is its last checkpoint (zero: none recognised).
	Checkpoint time.Time
	// Series is its step count over time, at most maxStepPoints points.
	Series []StepPoint
}

// AttemptSteps is one attempt's steps, every worker's.
type AttemptSteps struct {
	Attempt int       // from 0
	Start   time.Time // the attempt's nodes were being started
	End     time.Time // every node had exited
	Failed  time.Time // the failure was seen (zero: none)
	Hang    bool      // it failed by a hang
	Ranks   []RankSteps
}

func (t *stepTrack) result(node string, st rankIDs) RankSteps {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := RankSteps{Node: node, LocalRank: st.local, Rank: st.global, Checkpoint: t.checkpoint}
	if t.last < 0 {
		return r
	}
	r.Steps, r.LastStep, r.First, r.Last = t.count, t.last, t.first, t.lastAt
	r.Series = slices.Clone(t.series)
	if len(t.per) > 0 {
		s := slices.Clone(t.per)
		slices.Sort(s)
		r.Median, r.P90 = s[len(s)/2], s[min(len(s)-1, len(s)*9/10)]
	}
	return r
}

type rankIDs struct{ local, global int }
