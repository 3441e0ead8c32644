package preflight

import "testing"

func TestCheckSlurmNodes(t *testing.T) {
	out := []byte("node0|allocated|none\nnode1|draining|disk errors\nnode2|down*|Not responding\nnode3|mixed|none\nnode4|drained|hw\nnode1|draining|disk errors\n")
	got := map[string]Severity{}
	for _, f := range CheckSlurmNodes(out) {
		if f.ID != "slurm.node.state" || f.Remedy == "" {
			t.Errorf("finding %+v", f)
		}
		got[f.Message] = f.Severity
	}
	want := map[string]Severity{
		"Slurm reports node1 as draining: it takes no new work once this job ends": SeverityWarn,
		"Slurm reports node2 as not responding (down*)":                            SeverityFail,
		"Slurm reports node4 as drained":                                           SeverityFail,
	}
	if len(got) != len(want) {
		t.Errorf("findings %v, want %v", got, want)
	}
	for m, s := range want {
		if got[m] != s {
			t.Errorf("%q: %v, want %v (all: %v)", m, got[m], s, got)
		}
	}
	if fs := CheckSlurmNodes(nil); len(fs) != 0 {
		t.Errorf("no output: %v", fs)
	}
}
