package telemetry

import (
	"strings"
	"testing"
	"time"
)

func gpuSample(node string, gpu int, t time.Time, util, clock float64, reasons ...string) Sample {
	if reasons == nil {
		reasons = []string{}
	}
	return Sample{Node: node, GPU: gpu, Ranks: []int{gpu}, Time: t, SMPct: f64(util), SMClockMHz: f64(clock),
		TempC: f64(60), ClockReasons: reasons, Events: []string{}}
}

func TestDetector(t *testing.T) {
	t0 := time.Unix(2000, 0)
	type step struct {
		util, clock float64 // GPU 3's; its three peers run at 95% and 1980 MHz
		reasons     []string
		events      []string
	}
	steady := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	tests := []struct {
		name  string
		steps []step // one per second
		want  []string
	}{
		{"healthy", steady(30, step{util: 93, clock: 1980}), nil},
		{"low utilisation, sustained", steady(15, step{util: 40, clock: 1980}),
			[]string{"node2 gpu3 (rank 3): SM utilisation 40% for 10s while its peers' median is 95% (3 GPUs; straggler)"}},
		{"low utilisation, too short", append(steady(8, step{util: 40, clock: 1980}), steady(10, step{util: 95, clock: 1980})...), nil},
		{"low clock", steady(12, step{util: 99, clock: 1400}),
			[]string{"node2 gpu3 (rank 3): SM clock 1400 MHz for 10s while its busy peers' median is 1980 MHz (3 GPUs; 71% of it; clock reasons: none)"}},
		{"idle GPU at low clock is not slow", steady(12, step{util: 0, clock: 345}),
			[]string{"SM utilisation 0% for 10s"}},
		{"thermal throttle", steady(3, step{util: 95, clock: 1600, reasons: []string{"sw_power_cap", "hw_thermal_slowdown"}}),
			[]string{"node2 gpu3 (rank 3): clock throttled (hw_thermal_slowdown), SM clock 1600 MHz, 60 °C"}},
		{"power cap alone is normal", steady(20, step{util: 95, clock: 1900, reasons: []string{"sw_power_cap"}}), nil},
		{"throttle said once per onset", append(append(steady(3, step{util: 95, clock: 1980, reasons: []string{"hw_slowdown"}}),
			step{util: 95, clock: 1980}), steady(2, step{util: 95, clock: 1980, reasons: []string{"hw_slowdown"}})...),
			[]string{"clock throttled (hw_slowdown)", "clock throttled (hw_slowdown)"}},
		{"xid", []step{{util: 95, clock: 1980, events: []string{"xid 79"}}},
			[]string{"node2 gpu3 (rank 3): xid 79 reported by NVML"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDetector()
			var got []string
			for i, s := range tt.steps {
				now := t0.Add(time.Duration(i) * time.Second)
				for g := range 3 {
					node := "node1"
					if g == 2 {
						node = "node2"
					}
					if f := d.Observe(gpuSample(node, g, now, 95, 1980)); len(f) > 0 {
						t.Fatalf("healthy peer named: %v", f)
					}
				}
				sm := gpuSample("node2", 3, now, s.util, s.clock, s.reasons...)
				if s.events != nil {
					sm.Events = s.events
				}
				for _, f := range d.Observe(sm) {
					if !strings.HasPrefix(f.String(), "gorun: ") {
						t.Errorf("finding %q does not start with gorun:", f)
					}
					got = append(got, f.String())
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("findings = %q, want %d like %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("finding %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestDetectorOneGPUHasNoPeers(t *testing.T) {
	d := NewDetector()
	t0 := time.Unix(0, 0)
	for i := range 30 {
		if f := d.Observe(gpuSample("node1", 0, t0.Add(time.Duration(i)*time.Second), 5, 300)); len(f) > 0 {
			t.Fatalf("a lone GPU named a straggler: %v", f)
		}
	}
}

func TestStatusLine(t *testing.T) {
	t0 := time.Unix(3000, 0)
	s := NewStatus()
	if got := s.Line(t0, 0); got != "gorun: 0 lines/s" {
		t.Errorf("empty status = %q", got)
	}
	s.Observe(gpuSample("node1", 0, t0, 90, 1980))
	s.Observe(gpuSample("node1", 1, t0, 70, 1980))
	s.Observe(gpuSample("node3", 5, t0, 20, 1500))
	s.Observe(gpuSample("node3", 6, t0.Add(-time.Minute), 1, 300)) // stale: left out
	got := s.Line(t0.Add(2*time.Second), 240)
	want := "gorun: 120 lines/s | 3 GPUs: SM mean 60%, min 20% (node3 gpu5)"
	if got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
	none := NewStatus()
	if got := none.Line(t0, 0); got != "gorun: 0 lines/s" {
		t.Errorf("no-GPU status = %q, want the line rate alone", got)
	}
}

func TestStatusRateWindow(t *testing.T) {
	s := NewStatus()
	t0 := time.Unix(0, 0)
	// 10 lines a second, asked every 200 ms: the rate stays steady.
	for i := range 50 {
		got := s.Line(t0.Add(time.Duration(i)*200*time.Millisecond), int64(i*2))
		if i >= 3 && got != "gorun: 10 lines/s" {
			t.Fatalf("call %d: %q", i, got)
		}
	}
	// Output stops: the rate falls to 0 within the window.
	got := s.Line(t0.Add(10*time.Second+rateWindow), 98)
	if got != "gorun: 0 lines/s" {
		t.Errorf("after a quiet window: %q", got)
	}
}

// TestStatusStepRate: with steps counted, their rate follows the lines'.
func TestStatusStepRate(t *testing.T) {
	s := NewStatus()
	t0 := time.Unix(1000, 0)
	s.LineWithSteps(t0, 0, 10)
	if got := s.LineWithSteps(t0.Add(2*time.Second), 200, 19); got != "gorun: 100 lines/s | 4.5 steps/s" {
		t.Errorf("got %q", got)
	}
	if got := NewStatus().LineWithSteps(t0, 0, 0); got != "gorun: 0 lines/s" {
		t.Errorf("no steps: %q", got)
	}
}
