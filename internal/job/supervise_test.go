package job

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/wire"
)

// TestJobsWaitForNode0sStore: with warm restarts, every node but node 0
// is told to wait for node 0's rendezvous store before its warm torchrun
// runs (Job.WaitFor), at the attempt's own port; node 0 waits for
// nothing, and without warm restarts nobody does.
func TestJobsWaitForNode0sStore(t *testing.T) {
	plan := testPlan(t, 1, "node0", "node1", "node2")
	plan = plan.WithMasterPort(29611, "moved")
	store, ok := plan.StoreAddr()
	if !ok {
		t.Fatal("a 3-node plan has no store address")
	}
	got := jobs(plan, nil, 1, jobSettings{warm: true})
	for i, n := range got {
		want := store
		if i == 0 {
			want = ""
		}
		if n.Job.WaitFor != want {
			t.Errorf("node %d waits for %q, want %q", i, n.Job.WaitFor, want)
		}
	}
	if store[len(store)-6:] != ":29611" {
		t.Errorf("store %q is not at the attempt's port", store)
	}
	for i, n := range jobs(plan, nil, 1, jobSettings{}) {
		if n.Job.WaitFor != "" {
			t.Errorf("cold: node %d waits for %q", i, n.Job.WaitFor)
		}
	}
}

// TestJobsWarmEarly: the next attempt's standby starts with the attempt
// only on a node whose CPUs, as preflight found them, leave one for it
// (and one for the pool's import, whatever its ranks) beside every worker,
// torchrun and the agent; never where the CPUs are not known or warm
// restarts are off.
func TestJobsWarmEarly(t *testing.T) {
	plan := testPlan(t, 2, "big", "small", "unknown")
	for _, tc := range []struct {
		name string
		js   jobSettings
		want []bool // big, small, unknown
	}{
		{"warm", jobSettings{warm: true, cpus: map[string]int{"big": 4, "small": 3}}, []bool{true, false, false}},
		{"warm with a pool", jobSettings{warm: true, prewarm: []string{"torch"}, cpus: map[string]int{"big": 5, "small": 4}}, []bool{true, false, false}},
		{"cold", jobSettings{cpus: map[string]int{"big": 64, "small": 64, "unknown": 64}}, []bool{false, false, false}},
		{"--warm-restart early", jobSettings{warm: true, early: true, cpus: map[string]int{"big": 4, "small": 3}}, []bool{true, true, true}},
	} {
		for i, n := range jobs(plan, nil, 0, tc.js) {
			if n.WarmEarly != tc.want[i] {
				t.Errorf("%s: %s WarmEarly = %v, want %v", tc.name, n.Name, n.WarmEarly, tc.want[i])
			}
		}
	}
}

// TestJobsAskAhead: with warm restarts, the standby starts the GPU
// teardown check ahead, except on a node preflight found without GPUs
// (never asked there); without warm restarts there is no standby to ask.
func TestJobsAskAhead(t *testing.T) {
	plan := testPlan(t, 1, "gpu", "cpu", "unknown")
	gpus := map[string]int{"gpu": 8, "cpu": 0}
	for i, n := range jobs(plan, nil, 0, jobSettings{warm: true, gpus: gpus}) {
		want := []bool{true, false, true}[i]
		if got := len(n.Job.AskAhead) == 1 && n.Job.AskAhead[0] == wire.GPUFreeCommand; got != want {
			t.Errorf("%s: AskAhead %v, want the GPU check: %v", n.Name, n.Job.AskAhead, want)
		}
	}
	for _, n := range jobs(plan, nil, 0, jobSettings{gpus: gpus}) {
		if len(n.Job.AskAhead) != 0 {
			t.Errorf("cold: %s asks ahead %v", n.Name, n.Job.AskAhead)
		}
	}
}

// testPlan is the plan of x.py on the named nodes, slots processes each,
// without preflight facts.
func testPlan(t *testing.T, slots int, names ...string) envplan.Plan {
	t.Helper()
	var spec []string
	var nodes []hosts.Host
	for _, n := range names {
		spec = append(spec, fmt.Sprintf("%s:%d", n, slots))
		nodes = append(nodes, hosts.Host{Name: n, Slots: slots})
	}
	plan, err := envplan.Build(envplan.Spec{CommandLine: parse(t, "--hosts", strings.Join(spec, ","), "x.py"), Hosts: nodes}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}
