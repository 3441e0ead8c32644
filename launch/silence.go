package launch

import (
	"sync"
	"time"
)

// Silence is what one attempt showed of the group's silences: the spans
// in which no worker made progress. Start-up lasts until every worker
// has made progress once (a line, a write, a heartbeat, the rendezvous
// store joined, a clean exit); the attempt's start and each worker's
// start count as progress too. Only spans that ended in progress are
// measured: the silence a failure or a hang ends is not.
type Silence struct {
	Attempt int // from 0
	// StartedUp: every worker made progress once.
	StartedUp bool
	// Startup is the longest silence during start-up, Longest the longest
	// after it.
	Startup, Longest time.Duration
	// Ran is how long the attempt ran after its start-up.
	Ran time.Duration
	// Succeeded: every worker exited 0. Hung: the attempt ended in a
	// hang (ExitHang).
	Succeeded, Hung bool
	// LongestStep is the longest span after start-up in which no worker
	// made a training step, between two steps (0: fewer than two seen).
	LongestStep time.Duration
}

// silenceClock follows an attempt's progress, group-wide: the nodes'
// frame handlers tick it, the attempt's loop reads it.
type silenceClock struct {
	mu         sync.Mutex
	expected   int // workers of the attempt; 0: not known
	started    int // workers started
	progressed int // workers that made progress once
	last       time.Time
	upAt       time.Time // the end of start-up; zero before
	startup    time.Duration
	longest    time.Duration
	frozen     bool // the group is being stopped or diagnosed: what follows is no progress
	// The group's training steps: when some worker last made one (zero:
	// none yet), and the longest span between two after start-up.
	stepAt      time.Time
	longestStep time.Duration
	// The workers' output since the last step: its first and its last;
	// kept only where a stall is looked for (watchOutput, set before the
	// attempt starts: each frame of output would take the lock else).
	outFirst, outLast time.Time
	watchOutput       bool
}

func newSilenceClock(start time.Time, expected int) *silenceClock {
	return &silenceClock{last: start, expected: expected}
}

// The methods that change the clock, startingUp and lastStep take a nil
// clock (none kept) as a no-op.

// tick records progress at now: a worker's start (started), or its
// first progress (first), or more.
func (c *silenceClock) tick(now time.Time, started, first bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen {
		return
	}
	if gap := now.Sub(c.last); gap > 0 {
		if c.upAt.IsZero() {
			c.startup = max(c.startup, gap)
		} else {
			c.longest = max(c.longest, gap)
		}
		c.last = now
	}
	c.count(now, started, first)
}

// stepped records a training step some worker made at now.
func (c *silenceClock) stepped(now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen || now.Before(c.stepAt) {
		return
	}
	if !c.stepAt.IsZero() && !c.upAt.IsZero() && c.stepAt.After(c.upAt) {
		c.longestStep = max(c.longestStep, now.Sub(c.stepAt))
	}
	c.stepAt, c.outFirst = now, time.Time{}
}

// printed records output of some worker at now.
func (c *silenceClock) printed(now time.Time) {
	if c == nil || !c.watchOutput {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen || now.Before(c.stepAt) {
		return
	}
	if c.outFirst.IsZero() {
		c.outFirst = now
	}
	c.outLast = now
}

// stalled reports whether the group has made no training step for limit,
// though it printed all along: from within window of its last step until
// within window of now (window: the silence's limit). A group that went
// quiet after its step (a checkpoint written without a word) and spoke
// only later is not stalled, nor is one that stopped printing: silences
// are the silence rule's.
func (c *silenceClock) stalled(now time.Time, limit, window time.Duration) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.upAt.IsZero() && !c.stepAt.IsZero() && now.Sub(c.stepAt) >= limit &&
		!c.outFirst.IsZero() && c.outFirst.Sub(c.stepAt) <= window && now.Sub(c.outLast) <= window
}

// lastStep is when some worker last made a training step; zero: none
// yet, or none since start-up ended.
func (c *silenceClock) lastStep() time.Time {
	if c == nil {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.upAt.IsZero() {
		return time.Time{}
	}
	return c.stepAt
}

// settled records a worker that ended before it made progress (a failed
// exit): it is past its start-up, but its end is not progress.
func (c *silenceClock) settled(now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen {
		c.count(now, false, true)
	}
}

// freeze ends the clock's measures: the group is being stopped, or its
// hang diagnosed, and the ends and dumps that follow are no progress.
func (c *silenceClock) freeze() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
}

func (c *silenceClock) count(now time.Time, started, first bool) {
	if started {
		c.started++
	}
	if first {
		c.progressed++
	}
	if c.upAt.IsZero() && c.started > 0 && c.progressed >= c.started && (c.expected == 0 || c.started >= c.expected) {
		c.upAt = now
	}
}

// startingUp reports whether some worker has not made progress yet
// (false without a clock).
func (c *silenceClock) startingUp() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.upAt.IsZero()
}

// pending is how many started workers have made no progress yet.
func (c *silenceClock) pending() (waiting, of int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started - c.progressed, c.started
}

// result is the attempt's Silence, ended at end.
func (c *silenceClock) result(k int, end time.Time, succeeded, hung bool) Silence {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Silence{Attempt: k, StartedUp: !c.upAt.IsZero(), Startup: c.startup, Longest: c.longest,
		Succeeded: succeeded, Hung: hung, LongestStep: c.longestStep}
	if s.StartedUp {
		s.Ran = end.Sub(c.upAt)
	}
	return s
}
