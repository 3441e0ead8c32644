package envplan

import (
	"fmt"
	"testing"

	"github.com/gorun/gorun/hosts"
)

// BenchmarkBuild1024x8 plans a 1024-node job with 8 GPUs per node and full
// facts: the size a plan must still be instant for.
func BenchmarkBuild1024x8(b *testing.B) {
	s := newSpec([]string{"--max-restarts=3"}, "train.py", "--lr", "3e-4")
	s.Environ = map[string]string{"NCCL_DEBUG": "WARN", "NCCL_NVLS_ENABLE": "0", "PATH": "/usr/bin"}
	s.Gorun.Env = []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}
	facts := Facts{}
	for i := range 1024 {
		name := fmt.Sprintf("node%04d", i)
		s.Hosts = append(s.Hosts, hosts.Host{Name: name, Slots: 8})
		facts[name] = dgxFacts("eth0", fmt.Sprintf("10.%d.%d.1", i/256, i%256))
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := Build(s, facts)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Nodes) != 1024 || p.Nodes[1023].Ranks[7].Rank != 8191 || p.Nodes[1023].Ranks[7].CPUs == "" {
			b.Fatal("unexpected plan")
		}
	}
}
