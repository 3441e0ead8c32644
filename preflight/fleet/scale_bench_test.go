package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/preflight"
)

// factsAgent answers the collector with fixed facts, as a node's agent
// would over its session.
type factsAgent []byte

func (a factsAgent) AgentOutput(context.Context, ...string) ([]byte, error) { return a, nil }

// BenchmarkRunScale: preflight's head-side cost per node beyond any
// transport: Run over N simulated nodes that each answer with the facts
// a real H200 node sent (testdata/real/h200-2gpu), so the per-node checks,
// the checks across nodes and the report are the head's whole work.
// cpu-ms/node is the process's CPU per node per preflight; heap-KB/node
// what the report holds, per node, once Run returns.
//
//	go test ./preflight/fleet -run '^$' -bench RunScale -benchtime 3x
func BenchmarkRunScale(b *testing.B) {
	raw, err := os.ReadFile("../testdata/real/h200-2gpu/report.json")
	if err != nil {
		b.Fatal(err)
	}
	var real struct {
		Nodes []struct {
			Facts json.RawMessage `json:"facts"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(raw, &real); err != nil || len(real.Nodes) == 0 {
		b.Fatalf("testdata report: %v", err)
	}
	agent := factsAgent(real.Nodes[0].Facts)
	for _, n := range []int{32, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			targets := make([]Target, n)
			for i := range targets {
				targets[i] = Target{Host: fmt.Sprintf("n%d", i), Agent: agent}
			}
			var cpu time.Duration
			var held uint64
			for b.Loop() {
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				start := cpuTime()
				report := Run(context.Background(), targets, RunOptions{Want: preflight.Want{NProc: "gpu"}})
				cpu += cpuTime() - start
				b.StopTimer()
				if len(report.Nodes) != n {
					b.Fatalf("%d nodes in the report, want %d", len(report.Nodes), n)
				}
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				if after.HeapInuse > before.HeapInuse {
					held = max(held, after.HeapInuse-before.HeapInuse)
				}
				runtime.KeepAlive(report)
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N)/float64(n), "cpu-ms/node")
			b.ReportMetric(float64(held)/1024/float64(n), "heap-KB/node")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
