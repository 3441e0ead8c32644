package job

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/preflight"
)

func hostList(names ...string) []hosts.Host {
	var hs []hosts.Host
	for _, n := range names {
		hs = append(hs, hosts.Host{Name: n, Slots: 2})
	}
	return hs
}

// TestSplitSpares: hosts past --nnodes' maximum are spares, on gorun's
// static rendezvous only.
func TestSplitSpares(t *testing.T) {
	four := hostList("n0", "n1", "n2", "n3")
	tests := []struct {
		name   string
		args   []string
		active int
		spares []string
	}{
		{"--nnodes 3 of 4", []string{"--nnodes", "3"}, 3, []string{"n3"}},
		{"--nnodes 2:3 of 4", []string{"--nnodes", "2:3"}, 3, []string{"n3"}},
		{"--nnodes 2 of 4", []string{"--nnodes", "2"}, 2, []string{"n2", "n3"}},
		{"no --nnodes", nil, 4, nil},
		{"c10d: torchrun's own spares", []string{"--nnodes", "3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "n0:29400"}, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := parse(t, append(tt.args, "x.py")...)
			active, sp := splitSpares(cl, four)
			var got []string
			for _, h := range sp.all() {
				got = append(got, h.Name)
			}
			if len(active) != tt.active || !reflect.DeepEqual(got, tt.spares) {
				t.Errorf("active %d, spares %v; want %d, %v", len(active), got, tt.active, tt.spares)
			}
		})
	}
}

// TestSparesReplace: a failing node's place goes to the first ready
// spare, the others keep theirs; a failing spare is retired, a retired
// node that passes is ready again; with no spare left the failure stays.
func TestSparesReplace(t *testing.T) {
	sp := &spares{ready: hostList("s1", "s2")}
	next, left, done, lines := sp.replace(hostList("n0", "n1", "n2"), map[string]string{"n1": "not reached", "s1": "torch missing"})
	if names := strings.Join(hostNames(next), ","); names != "n0,s2,n2" || len(left) != 0 {
		t.Fatalf("next %s, left %v; want n0,s2,n2 with nothing left", names, left)
	}
	if len(done) != 1 || done[0] != (replacement{left: "n1", spare: "s2", rank: 1, why: "not reached"}) {
		t.Errorf("done = %+v", done)
	}
	want := []string{
		"gorun: spare s1 fails its checks, so it is not used: torch missing",
		"gorun: n1 leaves the job (not reached); spare s2 takes its place, node rank 1 (0 spares left)",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("lines\n%q\nwant\n%q", lines, want)
	}
	// Next restart: n2 fails, and no spare is ready: s1 still fails, n1
	// passes again and is the spare that takes n2's place.
	next, left, done, lines = sp.replace(next, map[string]string{"n2": "gpu.ecc", "s1": "torch missing"})
	if names := strings.Join(hostNames(next), ","); names != "n0,s2,n1" || len(left) != 0 || len(done) != 1 {
		t.Fatalf("next %s, left %v, done %+v:\n%s", names, left, done, strings.Join(lines, "\n"))
	}
	if !strings.Contains(strings.Join(lines, "\n"), "gorun: n1 passes its checks again: a spare now") {
		t.Errorf("lines %q", lines)
	}
	// No spare passes: the failure is left for shrink or the stop.
	_, left, done, _ = sp.replace(next, map[string]string{"s2": "not reached", "n1": "x", "s1": "x", "n2": "x"})
	if left["s2"] != "not reached" || len(done) != 0 {
		t.Errorf("left %v, done %+v; want s2's failure left", left, done)
	}
	// Without spares, every failure is left.
	if _, left, _, _ := (*spares)(nil).replace(hostList("a", "b"), map[string]string{"b": "down"}); left["b"] != "down" {
		t.Errorf("no spares: left %v", left)
	}
}

// TestJobReport: the job's report covers its nodes only, with the
// across-node checks made again over them: a spare of another torch
// fails nothing of theirs.
func TestJobReport(t *testing.T) {
	node := func(name, torch string) preflight.NodeReport {
		n := preflight.NodeReport{Host: name}
		n.Facts.Torch.Version = torch
		return n
	}
	all := preflight.NewReport([]preflight.NodeReport{node("n0", "2.5"), node("n1", "2.5"), node("s1", "1.13")}, nil)
	all = preflight.NewReport(all.Nodes, preflight.CheckAcross(all.Nodes))
	sub := jobReport(all, hostList("n0", "n1"))
	if len(sub.Nodes) != 2 {
		t.Fatalf("nodes %+v", sub.Nodes)
	}
	for _, f := range sub.Findings {
		if strings.Contains(f.Evidence, "s1") {
			t.Errorf("the spare is in the job's across checks: %+v", f)
		}
	}
}
