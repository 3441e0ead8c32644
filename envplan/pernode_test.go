package envplan

import (
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
)

// TestPerNodePlan: in local mode with more than one node or a node rank
// (one gorun per pod or per Slurm task) the plan says it is this node's
// only, the other nodes being outside gorun's reach, and that restarting
// every node together is not this gorun's; plain local mode says neither.
func TestPerNodePlan(t *testing.T) {
	pet := map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "2",
		"PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29500"}
	for _, tc := range []struct {
		name    string
		argv    []string
		env     map[string]string
		perNode bool
		header  string
		which   string
	}{
		{"Kubeflow's PET_*", []string{"x.py"}, pet, true, "job:        2 nodes; this plan covers this node only, 2 processes here", "node 1 of 2 nodes"},
		{"c10d, elastic", []string{"--nnodes", "1:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "job-0:29400", "x.py"}, nil, true,
			"job:        1 to 3 nodes; this plan covers this node only, 1 process here", "one of 1 to 3 nodes, ranked by the c10d rendezvous"},
		{"a node rank alone", []string{"--node-rank", "0", "x.py"}, nil, true, "job:        1 node x 1 process = 1 rank", "node 0 of 1 node"},
		{"plain local mode", []string{"--nproc-per-node", "2", "x.py"}, nil, false, "job:        1 node x 2 processes = 2 ranks", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := cmdline.Parse(tc.argv, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			p, err := Build(Spec{CommandLine: cl, Environ: map[string]string{}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := hasNote(p, NoteInfo, "this plan is one node's", "outside this gorun's reach", tc.which); got != tc.perNode {
				t.Errorf("per-node note: %v, want %v: %+v", got, tc.perNode, p.Notes)
			}
			if got := hasNote(p, NoteInfo, "stops this node's torchrun", "JobSet"); got != tc.perNode {
				t.Errorf("per-node restart note: %v, want %v", got, tc.perNode)
			}
			var b strings.Builder
			RenderTable(&b, p)
			if !strings.Contains(b.String(), tc.header+"\n") {
				t.Errorf("header, want %q:\n%s", tc.header, b.String())
			}
		})
	}
	cl, _ := cmdline.Parse([]string{"x.py"}, func(k string) string { return pet[k] })
	p, _ := Build(Spec{CommandLine: cl, Environ: map[string]string{}}, nil)
	if v := p.Nodes[0].Env["MASTER_ADDR"]; v.Reason != "PET_MASTER_ADDR" || v.Value != "job-node-0-0.job" {
		t.Errorf("MASTER_ADDR %+v, want job-node-0-0.job for PET_MASTER_ADDR", v)
	}
	if v := p.Nodes[0].Env["MASTER_PORT"]; v.Reason != "PET_MASTER_PORT" {
		t.Errorf("MASTER_PORT %+v, want its reason PET_MASTER_PORT", v)
	}
}
