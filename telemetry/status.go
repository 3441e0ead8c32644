package telemetry

import (
	"fmt"
	"time"
)

// Status keeps what the live status line shows: the latest sample of
// every GPU and the rate of output lines over the last rateWindow.
type Status struct {
	latest map[gpuKey]Sample
	counts []lineCount // oldest first, spanning about rateWindow
	rate   float64
	steps  float64 // training steps per second, over the same window
}

type lineCount struct {
	t            time.Time
	lines, steps int64
}

// rateWindow is how far back the line rate looks: long enough not to
// flicker between bursts, short enough to follow a change.
const rateWindow = 5 * time.Second

// NewStatus returns an empty Status.
func NewStatus() *Status { return &Status{latest: map[gpuKey]Sample{}} }

// Observe takes one sample.
func (s *Status) Observe(sm Sample) { s.latest[gpuKey{sm.Node, sm.GPU}] = sm }

// Line is the status line at now, given how many output lines the job has
// printed so far: "gorun: 120 lines/s | 8 GPUs: SM mean 87%, min 12%
// (node3 gpu5)", the line rate alone where no GPU is sampled. The slowest GPU is the one with the lowest SM
// utilisation, the lower SM clock breaking ties. Samples older than
// peerFresh are left out.
func (s *Status) Line(now time.Time, lines int64) string { return s.LineWithSteps(now, lines, 0) }

// LineWithSteps is Line with the training steps counted so far (steps;
// launch.Counts): their rate follows the line rate, where there are any
// ("gorun: 120 lines/s | 4.2 steps/s | ...").
func (s *Status) LineWithSteps(now time.Time, lines, steps int64) string {
	for len(s.counts) > 1 && now.Sub(s.counts[1].t) >= rateWindow {
		s.counts = s.counts[1:]
	}
	if len(s.counts) > 0 {
		if dt := now.Sub(s.counts[0].t).Seconds(); dt >= 0.5 {
			s.rate = float64(lines-s.counts[0].lines) / dt
			s.steps = float64(steps-s.counts[0].steps) / dt
		}
	}
	s.counts = append(s.counts, lineCount{now, lines, steps})
	line := fmt.Sprintf("gorun: %.0f lines/s", s.rate)
	if steps > 0 {
		line += fmt.Sprintf(" | %.1f steps/s", s.steps)
	}
	var n int
	var sum float64
	var slow *Sample
	for _, sm := range s.latest {
		if sm.SMPct == nil || now.Sub(sm.Time) > peerFresh {
			continue
		}
		n++
		sum += *sm.SMPct
		if slow == nil || *sm.SMPct < *slow.SMPct || *sm.SMPct == *slow.SMPct && slower(sm, *slow) {
			c := sm
			slow = &c
		}
	}
	if n > 0 {
		line += fmt.Sprintf(" | %d GPUs: SM mean %.0f%%, min %.0f%% (%s gpu%d)", n, sum/float64(n), *slow.SMPct, slow.Node, slow.GPU)
	}
	return line
}

// slower breaks a utilisation tie: the lower clock, then the name, so the
// line does not flicker between equal GPUs.
func slower(a, b Sample) bool {
	if a.SMClockMHz != nil && b.SMClockMHz != nil && *a.SMClockMHz != *b.SMClockMHz {
		return *a.SMClockMHz < *b.SMClockMHz
	}
	if a.Node != b.Node {
		return a.Node < b.Node
	}
	return a.GPU < b.GPU
}
