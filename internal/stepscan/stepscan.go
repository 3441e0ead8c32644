// Package stepscan recognises training steps and checkpoints in a
// worker's output, for goodput: where the run's time went.
//
// It runs on the node, in each worker's supervisor (gorun _rank), which
// reads every byte the worker writes anyway and sends the head only what
// it found (wire.FrameStep, wire.FrameCheckpoint): the head never reads
// the output for steps, so its cost does not grow with the job's output.
// Only the patterns cross the wire, the other way, in the job's
// environment (wire.StepsVar: Patterns.Encode).
package stepscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/lazyre"
)

// Patterns says how steps and checkpoints are recognised.
type Patterns struct {
	// Step, when set, is --step-pattern: a line it matches reports the
	// step its named group "step" holds. Nil: the defaults.
	Step *regexp.Regexp
	// Checkpoint, when set, is --checkpoint-pattern: a line it matches
	// reports a checkpoint saved. Nil: the defaults.
	Checkpoint *regexp.Regexp
	// Off: recognise nothing (--step-pattern off).
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
// epoch's bar), not a step of the old one (the head's count, launch).
var (
	defaultStep       = lazyre.New(`(?i)(?:^|[^a-z0-9_])(?:global_step|step|iter|iteration)\s*[:=#]?\s*\[?(?P<step>\d+)`)
	defaultBar        = lazyre.New(`(?P<step>\d+)/\d+\s*\[\d`)
	defaultBarExclude = lazyre.New(`(?i)valid|eval|test|predict|download|extract|map`)
	defaultCheckpoint = lazyre.New(`(?i)(?:sav(?:e|ed|ing)|wr(?:ote|iting|itten))\b.*\bcheckpoint|\bcheckpoint\b.*\b(?:saved|written)|\bsav(?:e|ed|ing) model to\b`)
)

// encoded is Patterns as the environment carries it.
type encoded struct {
	Step       string `json:"step,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Encode is p as wire.StepsVar's value: "" when p is Off (nothing is
// read), "{}" for the defaults.
func (p Patterns) Encode() string {
	if p.Off {
		return ""
	}
	var e encoded
	if p.Step != nil {
		e.Step = p.Step.String()
	}
	if p.Checkpoint != nil {
		e.Checkpoint = p.Checkpoint.String()
	}
	b, _ := json.Marshal(e)
	return string(b)
}

// Decode reads wire.StepsVar's value: "" is Off.
func Decode(s string) (Patterns, error) {
	if s == "" {
		return Patterns{Off: true}, nil
	}
	var e encoded
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		return Patterns{}, fmt.Errorf("step patterns %q: %w", s, err)
	}
	var p Patterns
	var err error
	if e.Step != "" {
		if p.Step, err = regexp.Compile(e.Step); err != nil {
			return Patterns{}, fmt.Errorf("step pattern: %w", err)
		}
	}
	if e.Checkpoint != "" {
		if p.Checkpoint, err = regexp.Compile(e.Checkpoint); err != nil {
			return Patterns{}, fmt.Errorf("checkpoint pattern: %w", err)
		}
	}
	return p, nil
}

// Every is how often at most a worker's output is read for its step:
// step numbers are absolute, so the lines between two reads count all the
// same, and a worker printing a step per line costs one parse per Every,
// not one per line (BenchmarkScan).
const Every = 10 * time.Millisecond

// Scanner reads one worker's output, both of its streams, as it comes.
// It is safe for concurrent use.
type Scanner struct {
	p          Patterns
	step       func(n int64, at time.Time) // a step the output reported at at
	checkpoint func(at time.Time)          // a checkpoint line written at at

	mu        sync.Mutex
	lastParse time.Time // when the output was last read for a step, found or not
	lastStep  int64     // the last step told (-1: none): the same again is not
	pending   []byte    // a segment written since, not read yet
	pendingAt time.Time
	timer     *time.Timer // reads pending once its read is due
	closed    bool

	timerMu sync.Mutex // held by the timer's read, so that Close waits for one under way
}

// New is a Scanner that tells step and checkpoint what it finds; nil
// when p is Off.
func New(p Patterns, step func(n int64, at time.Time), checkpoint func(at time.Time)) *Scanner {
	if p.Off {
		return nil
	}
	return &Scanner{p: p, step: step, checkpoint: checkpoint, lastStep: -1}
}

// Scan reads what the worker wrote at now: every checkpoint line, and the
// step of its last segment that reports one ("\n" and "\r" end a segment:
// a tqdm bar's every frame), at most once per Every. A write that comes
// sooner leaves its last segment pending, read when that read is due (a
// timer, or the next write), or at Close: the last step is never missed,
// and never late by more than Every.
func (s *Scanner) Scan(p []byte, now time.Time) {
	if s == nil || len(p) == 0 {
		return
	}
	if s.p.Checkpoint != nil || mayReportCheckpoint(p) {
		forSegments(p, func(seg []byte) bool {
			if s.p.Checkpoint != nil && s.p.Checkpoint.Match(seg) ||
				s.p.Checkpoint == nil && mayReportCheckpoint(seg) && defaultCheckpoint().Match(seg) {
				s.checkpoint(now)
				return false // one a write is enough: they all have its time
			}
			return true
		})
	}
	s.mu.Lock()
	due := s.lastParse.IsZero() || now.Sub(s.lastParse) >= Every
	if !due {
		if seg := s.lastCandidate(p); len(seg) > 0 {
			s.pending, s.pendingAt = append(s.pending[:0], seg...), now
			if s.timer == nil && !s.closed {
				s.timer = time.AfterFunc(Every-now.Sub(s.lastParse), s.timerRead)
			}
		}
		s.mu.Unlock()
		return
	}
	// Found or not: output with no step in it (a flood of other lines)
	// is read no more often than output with steps.
	s.lastParse = now
	s.mu.Unlock()
	s.readPending() // an earlier write's step, first: this write may hold none
	forSegmentsBack(p, func(seg []byte) bool {
		if s.p.Step == nil && !mayReportStep(seg) {
			return true
		}
		n, ok := s.stepOf(seg)
		if ok {
			s.tell(n, now)
		}
		return !ok
	})
}

// Close reads what is pending and stops the timer: the worker's output
// has ended. Nothing is told after Close returns.
func (s *Scanner) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.timerMu.Lock() // a timer's read under way ends first
	defer s.timerMu.Unlock()
	s.readPending()
}

// timerRead is the timer's read of what is pending, unless Close came first.
func (s *Scanner) timerRead() {
	s.timerMu.Lock()
	defer s.timerMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		s.readPending()
	}
}

// readPending counts the step of a segment left pending by a write that
// came before its read was due.
func (s *Scanner) readPending() {
	s.mu.Lock()
	seg, at := s.pending, s.pendingAt
	s.pending, s.timer = nil, nil
	if len(seg) > 0 {
		s.lastParse = time.Now()
	}
	s.mu.Unlock()
	if len(seg) == 0 {
		return
	}
	if n, ok := s.stepOf(seg); ok {
		s.tell(n, at)
	}
}

// tell passes step n on, unless it was the last told.
func (s *Scanner) tell(n int64, at time.Time) {
	s.mu.Lock()
	same := n == s.lastStep
	s.lastStep = n
	s.mu.Unlock()
	if !same {
		s.step(n, at)
	}
}

func (s *Scanner) stepOf(seg []byte) (int64, bool) {
	if s.p.Step != nil {
		return namedStep(s.p.Step, seg)
	}
	if n, ok := namedStep(defaultStep(), seg); ok {
		return n, true
	}
	if n, ok := namedStep(defaultBar(), seg); ok && !defaultBarExclude().Match(seg) {
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

// lookBack bounds how far from the end of a write whose read is not due
// the last segment that may report a step is looked for: a step line and
// a few lines after it (its loss, its timing), at a cost that does not
// grow with the write.
const lookBack = 4 << 10

// lastCandidate is the last segment within lookBack of p's end that may
// report a step: one the default patterns' quick look passes, or that
// the user's pattern matches.
func (s *Scanner) lastCandidate(p []byte) []byte {
	if len(p) > lookBack {
		p = p[len(p)-lookBack:]
		if i := bytes.IndexAny(p, "\r\n"); i >= 0 {
			p = p[i+1:] // not a piece of a line
		}
	}
	var last []byte
	forSegmentsBack(p, func(seg []byte) bool {
		if s.p.Step != nil && s.p.Step.Match(seg) || s.p.Step == nil && mayReportStep(seg) {
			last = seg
			return false
		}
		return true
	})
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
