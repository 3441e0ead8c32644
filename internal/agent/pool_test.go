package agent

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAutoPoolOff: the next attempt's pool starts beside a running
// attempt where the CPUs it leaves idle hold the pool's imports, whatever
// the number of its workers; a launch's pool counts CPUs only.
func TestAutoPoolOff(t *testing.T) {
	idle := func(free float64) func(time.Duration) (float64, error) {
		return func(time.Duration) (float64, error) { return free, nil }
	}
	asked := func(time.Duration) (float64, error) { t.Error("a launch's pool measured the CPUs"); return 0, nil }
	for _, c := range []struct {
		cpus, imports, beside int
		idle                  func(time.Duration) (float64, error)
		off                   string // "": the pool starts
	}{
		{cpus: 2, imports: 1, idle: asked},
		{cpus: 1, imports: 1, idle: asked, off: "1 CPUs here for 1 pooled import and torchrun's"},
		{cpus: 4, imports: 4, idle: asked, off: "4 CPUs here for 4 pooled imports"},
		{cpus: 2, imports: 1, beside: 2, idle: idle(0.9)},                                                          // 2 ranks on 2 CPUs, mostly waiting on a GPU
		{cpus: 2, imports: 1, beside: 2, idle: idle(0.3), off: "0.3 of 2 CPUs idle here beside 2 running workers"}, // busy CPUs
		{cpus: 64, imports: 2, beside: 8, idle: idle(1.2), off: "too few for 2 pooled imports"},
		{cpus: 64, imports: 2, beside: 8, idle: idle(40)},
		{cpus: 2, imports: 1, beside: 2, idle: func(time.Duration) (float64, error) { return 0, errors.New("no /proc") }},
	} {
		off := autoPoolOff(c.cpus, c.imports, c.beside, c.idle)
		if (c.off == "") != (off == "") || !strings.Contains(off, c.off) {
			t.Errorf("%d CPUs, %d imports beside %d workers: %q, want %q", c.cpus, c.imports, c.beside, off, c.off)
		}
	}
}

// TestIdleCPUs reads /proc/stat's lines of the CPUs this process may use,
// and sees them busy while every one of them spins.
func TestIdleCPUs(t *testing.T) {
	var set unix.CPUSet
	set.Set(0)
	set.Set(2)
	const stat = "cpu  10 0 10 100 5 0 0 0 0 0\ncpu0 1 2 3 40 5 6 7 8 100 0\ncpu1 9 9 9 9 9 9 9 9 0 0\ncpu2 1 1 1 10 0 0 0 1 0 0\nintr 1 2 3\n"
	got, err := parseCPUTicks(stat, &set)
	if want := (ticks{idle: 40 + 5 + 10, total: 72 + 14}); err != nil || got != want {
		t.Errorf("parseCPUTicks: %+v, %v; want %+v", got, err, want)
	}
	if s := idleShare(ticks{10, 20}, ticks{40, 80}); s != 0.5 {
		t.Errorf("idleShare: %v, want 0.5", s)
	}
	if s := idleShare(ticks{40, 20}, ticks{30, 80}); s != 0 {
		t.Errorf("idleShare with idle time counted back: %v, want 0", s)
	}
	var none unix.CPUSet
	none.Set(7)
	if _, err := parseCPUTicks(stat, &none); err == nil {
		t.Error("no line for the set's CPUs: want an error")
	}
	cpus := usableCPUs()
	if procs := runtime.GOMAXPROCS(0); procs < cpus {
		t.Skipf("GOMAXPROCS %d under %d CPUs (a CPU quota): the test cannot keep them all busy", procs, cpus)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range cpus {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	free, err := idleCPUs(besideWindow)
	close(stop)
	wg.Wait()
	if err != nil || free > 0.5 {
		t.Errorf("idleCPUs with all %d CPUs spinning: %.2f, %v; want under half a CPU", cpus, free, err)
	}
}
