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
	q := p.WithMasterPort(29501)
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
