package envplan

import (
	"slices"
	"testing"
)

func TestWithMasterPort(t *testing.T) {
	spec := newSpec(nil, "train.py")
	spec.Hosts = testHosts("a:1,b:1")
	p, err := Build(spec, Facts{"a": smallFacts(1, "eth0", "10.0.0.1"), "b": smallFacts(1, "eth0", "10.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	if port, ok := p.MasterPort(); !ok || port != 29500 {
		t.Fatalf("MasterPort = %d, %v", port, ok)
	}
	q := p.WithMasterPort(29501, "moved")
	for i, n := range q.Nodes {
		if !slices.Contains(n.Command, "--master_port=29501") || slices.Contains(n.Command, "--master_port=29500") {
			t.Errorf("node %d command %q", i, n.Command)
		}
		if n.Env["MASTER_PORT"].Value != "29501" {
			t.Errorf("node %d MASTER_PORT %+v", i, n.Env["MASTER_PORT"])
		}
	}
	if addr, ok := q.StoreAddr(); !ok || addr != p.Nodes[0].Env["MASTER_ADDR"].Value+":29501" {
		t.Errorf("StoreAddr = %q, %v; want node 0's address and the new port", addr, ok)
	}
	if !slices.Contains(p.Nodes[1].Command, "--master_port=29500") || p.Nodes[1].Env["MASTER_PORT"].Value != "29500" {
		t.Errorf("the original plan changed: %q", p.Nodes[1].Command)
	}
	local, err := Build(newSpec(nil, "train.py"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := local.MasterPort(); ok {
		t.Error("local mode has no gorun-placed master port")
	}
	if _, ok := local.StoreAddr(); ok {
		t.Error("local mode has no gorun-placed store")
	}
}

// TestWithMasterPortLocal: a plan of one local node on torchrun's default
// port gets --master_port before --max_restarts=0; one whose command line
// has an endpoint of the user's is left as it is.
func TestWithMasterPortLocal(t *testing.T) {
	local, err := Build(newSpec(nil, "train.py"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := local.StorePort(); !ok || p != 29500 {
		t.Fatalf("StorePort = %d, %v; want torchrun's default", p, ok)
	}
	q := local.WithMasterPort(29501, "moved")
	cmd := q.Nodes[0].Command
	i := slices.Index(cmd, "--master_port=29501")
	if i < 0 || cmd[i+1] != "--max_restarts=0" || len(cmd) != len(local.Nodes[0].Command)+1 {
		t.Errorf("command %q, want --master_port=29501 placed before --max_restarts=0", cmd)
	}
	if p, ok := q.MasterPort(); !ok || p != 29501 || q.Config.MasterPort != 29501 {
		t.Errorf("MasterPort = %d, %v; config %d", p, ok, q.Config.MasterPort)
	}
	if slices.Contains(local.Nodes[0].Command, "--master_port=29501") {
		t.Error("the original plan changed")
	}
	ep, err := Build(newSpec([]string{"--rdzv-endpoint", "127.0.0.1:29700"}, "train.py"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ep.StorePort(); ok {
		t.Error("an endpoint the user gave is gorun's to move")
	}
	if got := ep.WithMasterPort(29701, "moved"); !slices.Equal(got.Nodes[0].Command, ep.Nodes[0].Command) {
		t.Errorf("an endpoint of the user's was rewritten: %q", got.Nodes[0].Command)
	}
}
