package launch

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// The head's own cost per node for a whole launch, beyond any transport:
// launch.Run over N simulated nodes (fake runners below sshexec, as the
// agents' relayed streams look), each with 8 workers that start, join the
// store, print 20 lines each and exit 0, then the node's agent exits 0.
// cpu-ms/node is the process's CPU (user + sys) per node per launch;
// heap-KB/node is the peak of the Go heap in use during the launch, over
// the heap before it, per node; goroutines/node the peak count of the
// head's goroutines, per node (the fake nodes' own included: 2 each).
//
//	go test ./launch -run '^$' -bench RunScale -benchtime 3x
func BenchmarkRunScale(b *testing.B) {
	const workers, lines = 8, 20
	for _, n := range []int{32, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			frames := nodeFrames(workers, lines, n*workers)
			nodes := func() []Node {
				ns := make([]Node, n)
				for i := range ns {
					name := fmt.Sprintf("n%d", i)
					ns[i] = Node{Name: name, Workers: workers, Runner: &fakeRunner{name: name,
						sc: script{after: 300 * time.Millisecond, frames: frames}}}
				}
				return ns
			}
			var cpu time.Duration
			var peak uint64
			var goroutines int
			for b.Loop() {
				b.StopTimer()
				ns := nodes()
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				base, baseG := ms.HeapInuse, runtime.NumGoroutine()
				stop := make(chan struct{})
				var top uint64
				var topG int
				var wg sync.WaitGroup
				wg.Go(func() { top, topG = peaks(stop) })
				b.StartTimer()
				before := cpuTime()
				res, err := Run(context.Background(), Options{
					Attempt: func(context.Context, int, *Restart) ([]Node, error) { return ns, nil },
					Out:     io.Discard, Diag: io.Discard,
				})
				cpu += cpuTime() - before
				b.StopTimer()
				close(stop)
				wg.Wait()
				if err != nil || res.Attempts != 1 {
					b.Fatalf("Run = %+v, %v", res, err)
				}
				if top > base {
					peak = max(peak, top-base)
				}
				goroutines = max(goroutines, topG-baseG-1) // the sampler's own
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N)/float64(n), "cpu-ms/node")
			b.ReportMetric(float64(peak)/1024/float64(n), "heap-KB/node")
			b.ReportMetric(float64(goroutines)/float64(n), "goroutines/node")
		})
	}
}

// nodeFrames is what one simulated node's agent relays: every worker
// started and joined, lines lines each, every worker's clean exit; all in
// one write, so that the fake node's own work stays out of the figures.
func nodeFrames(workers, lines, world int) []timedFrame {
	var all []byte
	add := func(f []byte) { all = append(all, f...) }
	for lr := range workers {
		add(wire.AppendFrame(nil, wire.FrameStarted, wire.JSON(wire.WorkerStarted{Rank: lr, LocalRank: lr, WorldSize: world, PID: 100 + lr})))
		add(wire.AppendFrame(nil, wire.FrameInit, wire.AppendRank(nil, lr)))
	}
	for i := range lines {
		for lr := range workers {
			add(wire.AppendFrame(nil, wire.FrameOut, fmt.Appendf(wire.AppendRank(nil, lr), "step %d loss 0.%04d\n", i, i)))
		}
	}
	for lr := range workers {
		add(wire.AppendFrame(nil, wire.FrameExit, wire.JSON(wire.WorkerExit{Rank: lr, LocalRank: lr, Time: time.Now().UnixNano()})))
	}
	return []timedFrame{{frame: all}}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peaks samples the heap in use and the goroutines every 20 ms until
// stop is closed, and returns the most it saw of each.
func peaks(stop <-chan struct{}) (heap uint64, goroutines int) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap, goroutines = max(heap, ms.HeapInuse), max(goroutines, runtime.NumGoroutine())
		select {
		case <-stop:
			return heap, goroutines
		case <-t.C:
		}
	}
}
