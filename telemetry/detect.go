package telemetry

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/clockevent"
)

// Straggler thresholds (docs/guide.md, "GPU telemetry", lists them). A GPU is
// compared with its peers: the other GPUs of the job, on any node, whose
// latest sample is at most peerFresh old.
const (
	// SustainFor is how long a GPU must stay below its peers before it is
	// named: long enough that a data-loader pause or a checkpoint write on
	// one rank does not count.
	SustainFor = 10 * time.Second
	// LowUtilGap: SM utilisation at least this many points below the
	// peers' median, while that median is at least LowUtilPeerMin.
	LowUtilGap     = 25.0
	LowUtilPeerMin = 50.0
	// LowClockRatio: SM clock at or below this fraction of the busy peers'
	// median clock, while the GPU itself is busy (BusyPct or more).
	LowClockRatio = 0.85
	BusyPct       = 10.0
	// ThrottleSamples: a hardware or thermal clock-event reason present in
	// this many consecutive samples is named (sw_power_cap is not: a busy
	// GPU at its power limit is normal).
	ThrottleSamples = 2
)

// peerFresh is how old a peer's latest sample may be and still count.
const peerFresh = 5 * time.Second

// Finding is one straggler or fault seen during the run.
type Finding struct {
	Time     time.Time
	Node     string
	GPU      int
	Ranks    []int
	Kind     string // "low_util", "low_clock", "throttle", "event"
	Evidence string
}

// String is the line gorun prints: "gorun: node3 gpu5 (rank 13): evidence".
func (f Finding) String() string {
	return fmt.Sprintf("gorun: %s gpu%d%s: %s", f.Node, f.GPU, rankText(f.Ranks), f.Evidence)
}

func rankText(ranks []int) string {
	if len(ranks) == 0 || slices.Contains(ranks, -1) {
		return ""
	}
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprint(r)
	}
	if len(ranks) == 1 {
		return " (rank " + parts[0] + ")"
	}
	return " (ranks " + strings.Join(parts, ",") + ")"
}

type gpuKey struct {
	node string
	gpu  int
}

// Detector names stragglers and faults from the samples of every node, as
// they arrive.
type Detector struct {
	latest map[gpuKey]Sample
	state  map[gpuKey]*detectState
}

type detectState struct {
	lowUtilSince, lowClockSince time.Time // zero when the condition does not hold
	lowUtilSaid, lowClockSaid   bool
	throttleRun                 int
	throttleSaid                bool
}

// NewDetector returns an empty Detector.
func NewDetector() *Detector {
	return &Detector{latest: map[gpuKey]Sample{}, state: map[gpuKey]*detectState{}}
}

// Observe takes one sample and returns what it newly shows: each finding
// is returned once when its condition starts to hold, and again only after
// it has cleared.
func (d *Detector) Observe(s Sample) []Finding {
	k := gpuKey{s.Node, s.GPU}
	d.latest[k] = s
	st := d.state[k]
	if st == nil {
		st = &detectState{}
		d.state[k] = st
	}
	var out []Finding
	say := func(kind, evidence string) {
		out = append(out, Finding{Time: s.Time, Node: s.Node, GPU: s.GPU, Ranks: s.Ranks, Kind: kind, Evidence: evidence})
	}
	for _, e := range s.Events {
		say("event", e+" reported by NVML")
	}

	var active []string
	for _, r := range s.ClockReasons {
		if clockevent.IsSlowdown(r) { // a fault or an environment problem, not normal operation
			active = append(active, r)
		}
	}
	if len(active) > 0 {
		st.throttleRun++
		if st.throttleRun >= ThrottleSamples && !st.throttleSaid {
			st.throttleSaid = true
			ev := "clock throttled (" + strings.Join(active, ", ") + ")"
			if s.SMClockMHz != nil {
				ev += fmt.Sprintf(", SM clock %.0f MHz", *s.SMClockMHz)
			}
			if s.TempC != nil {
				ev += fmt.Sprintf(", %.0f °C", *s.TempC)
			}
			say("throttle", ev)
		}
	} else {
		st.throttleRun, st.throttleSaid = 0, false
	}

	var utils, clocks []float64
	for pk, p := range d.latest {
		if pk == k || s.Time.Sub(p.Time) > peerFresh || p.Time.Sub(s.Time) > peerFresh {
			continue
		}
		if p.SMPct != nil {
			utils = append(utils, *p.SMPct)
			if *p.SMPct >= BusyPct && p.SMClockMHz != nil {
				clocks = append(clocks, *p.SMClockMHz)
			}
		}
	}
	if s.SMPct != nil && len(utils) > 0 {
		med := median(utils)
		low := med >= LowUtilPeerMin && *s.SMPct <= med-LowUtilGap
		if ev, ok := sustained(low, s.Time, &st.lowUtilSince, &st.lowUtilSaid); ok {
			say("low_util", fmt.Sprintf("SM utilisation %.0f%% for %s while its peers' median is %.0f%% (%s; straggler)", *s.SMPct, ev, med, gpus(len(utils))))
		}
	}
	if s.SMPct != nil && s.SMClockMHz != nil && len(clocks) > 0 {
		med := median(clocks)
		low := *s.SMPct >= BusyPct && *s.SMClockMHz <= LowClockRatio*med
		if ev, ok := sustained(low, s.Time, &st.lowClockSince, &st.lowClockSaid); ok {
			say("low_clock", fmt.Sprintf("SM clock %.0f MHz for %s while its busy peers' median is %.0f MHz (%s; %.0f%% of it; clock reasons: %s)",
				*s.SMClockMHz, ev, med, gpus(len(clocks)), 100**s.SMClockMHz/med, reasonText(s.ClockReasons)))
		}
	}
	return out
}

// sustained tracks one condition: it reports (once) when cond has held for
// SustainFor, with how long it has held.
func sustained(cond bool, now time.Time, since *time.Time, said *bool) (string, bool) {
	if !cond {
		*since, *said = time.Time{}, false
		return "", false
	}
	if since.IsZero() {
		*since = now
	}
	held := now.Sub(*since)
	if held < SustainFor || *said {
		return "", false
	}
	*said = true
	return held.Round(time.Second).String(), true
}

func gpus(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

func reasonText(r []string) string {
	if len(r) == 0 {
		return "none"
	}
	return strings.Join(r, ", ")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
