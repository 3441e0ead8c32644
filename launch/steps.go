package launch

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Steps says how training steps and checkpoints are recognised in the
// workers' output (Options.Steps), for goodput: where the run's time went.
type Steps struct {
	// Step, when set, is --step-pattern: a line it matches reports the
	// step its named group "step" holds. Nil: the defaults (DefaultSteps).
	Step *regexp.Regexp
	// Checkpoint, when set, is --checkpoint-pattern: a line it matches
	// reports a checkpoint saved. Nil: the defaults.
	Checkpoint *regexp.Regexp
	// Off: recognise nothing.
	Off bool
}

// The default patterns. A step is a number after "step", "iter",
// "iteration" or "global_step" ("step 120", "Step: 120", "[iter 120/5000]",
// "global_step=120"), or the count of a tqdm bar ("120/5000 [00:41<..."),
// the form of Lightning's and the Hugging Face Trainer's progress bars, on
// a line that names no validation, evaluation, test, prediction or
// download. A checkpoint is a line that says one was saved or written, or
// that a model is being saved (Lightning's ModelCheckpoint).
// What keeps a false match from counting: a word must end right before
// "step" or "iter" (so max_steps=, num_iters= do not match), the number must
// follow it directly, and a step number that goes back is a new count (an
// epoch's bar), not a step of the old one.
var (
	defaultStep       = regexp.MustCompile(`(?i)(?:^|[^a-z0-9_])(?:global_step|step|iter|iteration)\s*[:=#]?\s*\[?(?P<step>\d+)`)
	defaultBar        = regexp.MustCompile(`(?P<step>\d+)/\d+\s*\[\d`)
	defaultBarExclude = regexp.MustCompile(`(?i)valid|eval|test|predict|download|extract|map`)
	defaultCheckpoint = regexp.MustCompile(`(?i)(?:sav(?:e|ed|ing)|wr(?:ote|iting|itten))\b.*\bcheckpoint|\bcheckpoint\b.*\b(?:saved|written)|\bsav(?:e|ed|ing) model to\b`)
)

// stepTrack is what one worker's output said of its steps in one attempt.
// Both of the worker's streams feed it.
type stepTrack struct {
	steps   Steps
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
	lastParse  time.Time       // when the output was last read for a step, found or not (stepEvery)
	pending    []byte          // a segment written since, not read yet
	pendingAt  time.Time
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

func newStepTrack(s Steps, c *stepCounter, stepped func(time.Time)) *stepTrack {
	return &stepTrack{steps: s, counter: c, stepped: stepped, last: -1}
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

// stepEvery is how often at most a worker's output is read for its step:
// step numbers are absolute, so the lines between two reads count all
// the same, and a worker printing a step per line costs the head one
// parse per stepEvery, not one per line (BenchmarkStepScan).
const stepEvery = 10 * time.Millisecond

// checkpointAt records a checkpoint the worker said it saved at now by
// touching $GORUN_CHECKPOINT_FILE: said outright, it counts even where
// steps are not read (--step-pattern off).
func (t *stepTrack) checkpointAt(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checkpoint = now
}

// scan reads what a worker wrote at now: every checkpoint line, and the
// step of its last segment that reports one ("\n" and "\r" end a segment:
// a tqdm bar's every frame), at most once per stepEvery. A write that
// comes sooner leaves its last segment pending, read when the next read
// is due or the attempt's steps are taken (result), so the last step is
// never missed.
func (t *stepTrack) scan(p []byte, now time.Time) {
	if t == nil || t.steps.Off || len(p) == 0 {
		return
	}
	if t.steps.Checkpoint != nil || mayReportCheckpoint(p) {
		forSegments(p, func(seg []byte) bool {
			if t.steps.Checkpoint != nil && t.steps.Checkpoint.Match(seg) ||
				t.steps.Checkpoint == nil && mayReportCheckpoint(seg) && defaultCheckpoint.Match(seg) {
				t.mu.Lock()
				t.checkpoint = now
				t.mu.Unlock()
			}
			return true
		})
	}
	t.mu.Lock()
	due := t.lastParse.IsZero() || now.Sub(t.lastParse) >= stepEvery
	if due {
		// Found or not: output with no step in it (a flood of other
		// lines) is read no more often than output with steps.
		t.lastParse = now
	}
	t.mu.Unlock()
	if !due {
		if seg := lastSegment(p); len(seg) > 0 && (t.steps.Step != nil || mayReportStep(seg)) {
			t.mu.Lock()
			t.pending, t.pendingAt = append(t.pending[:0], seg...), now
			t.mu.Unlock()
		}
		return
	}
	t.readPending()
	forSegmentsBack(p, func(seg []byte) bool {
		if t.steps.Step == nil && !mayReportStep(seg) {
			return true
		}
		n, ok := t.stepOf(seg)
		if ok {
			t.step(n, now)
		}
		return !ok
	})
}

// readPending counts the step of a segment left pending by a write that
// came before its read was due.
func (t *stepTrack) readPending() {
	t.mu.Lock()
	seg, at := t.pending, t.pendingAt
	t.pending = nil
	t.mu.Unlock()
	if len(seg) == 0 {
		return
	}
	if n, ok := t.stepOf(seg); ok {
		t.step(n, at)
	}
}

// forSegments calls f on each segment of p (ended by "\n" or "\r",
// shorter than 4096 bytes), first to last, while f returns true.
func forSegments(p []byte, f func([]byte) bool) {
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		seg := p
		if i >= 0 {
			seg, p = p[:i], p[i+1:]
		} else {
			p = nil
		}
		if len(seg) > 0 && len(seg) < 4096 && !f(seg) {
			return
		}
	}
}

// forSegmentsBack is forSegments from the last segment to the first.
func forSegmentsBack(p []byte, f func([]byte) bool) {
	p = bytes.TrimRight(p, "\r\n")
	for len(p) > 0 {
		i := len(p) - 1
		for i >= 0 && p[i] != '\n' && p[i] != '\r' {
			i--
		}
		seg := p[i+1:]
		if len(seg) > 0 && len(seg) < 4096 && !f(seg) {
			return
		}
		if i < 0 {
			return
		}
		p = bytes.TrimRight(p[:i], "\r\n")
	}
}

// lastSegment is p's last non-empty segment.
func lastSegment(p []byte) []byte {
	var last []byte
	forSegmentsBack(p, func(seg []byte) bool { last = seg; return false })
	return last
}

// mayReportCheckpoint is a quick look for what the default checkpoint
// pattern needs: "checkpoint" (any case of its first letter) or "ckpt"
// (Lightning's file name in its "saving model to" line): both hold "ckp",
// one search of the whole buffer.
func mayReportCheckpoint(p []byte) bool {
	return bytes.Contains(p, []byte("ckp"))
}

// mayReportStep is a quick look for what the default step patterns need:
// a digit, and "/" or "tep" or "ter" (case aside).
func mayReportStep(seg []byte) bool {
	digit, hint := false, false
	for i, c := range seg {
		switch {
		case c >= '0' && c <= '9':
			digit = true
		case c == '/':
			hint = true
		case (c == 't' || c == 'T') && i+2 < len(seg):
			a, b := seg[i+1]|0x20, seg[i+2]|0x20
			hint = hint || a == 'e' && (b == 'p' || b == 'r')
		}
	}
	return digit && hint
}

// stepOf is the step seg reports, if any.
func (t *stepTrack) stepOf(seg []byte) (int64, bool) {
	if t.steps.Step != nil {
		return namedStep(t.steps.Step, seg)
	}
	if n, ok := namedStep(defaultStep, seg); ok {
		return n, true
	}
	if n, ok := namedStep(defaultBar, seg); ok && !defaultBarExclude.Match(seg) {
		return n, true
	}
	return 0, false
}

func namedStep(re *regexp.Regexp, seg []byte) (int64, bool) {
	m := re.FindSubmatch(seg)
	if m == nil {
		return 0, false
	}
	i := re.SubexpIndex("step")
	if i < 0 || m[i] == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(m[i]), 10, 64)
	return n, err == nil
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
	t.readPending()
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
