package envplan

import (
	"slices"
	"testing"

	"github.com/gorun/gorun/internal/wire"
)

func TestWrapWorkers(t *testing.T) {
	facts := Facts{"localhost": {CPUs: "0-7", Gorun: testGorun, Python: testPython}}
	tests := []struct {
		name    string
		given   []string
		script  string
		args    []string
		want    []string
		wantVar string
	}{
		{"python script", []string{"--nproc_per_node=2"}, "train.py", []string{"--lr", "1"},
			[]string{"torchrun", "--nproc_per_node=2", "--max_restarts=0", "--monitor_interval=0.1", "--no_python", testGorun, "_rank", "--", "train.py", "--lr", "1"},
			"0-3;4-7"},
		{"module: the supervisor runs python -m, torchrun gets no --module", []string{"--nproc_per_node=2", "--module"}, "pkg.train", nil,
			[]string{"torchrun", "--nproc_per_node=2", "--max_restarts=0", "--monitor_interval=0.1", "--no_python", testGorun, "_rank", "-m", "--", "pkg.train"},
			"0-3;4-7"},
		{"no-python: the supervisor runs the program itself", []string{"--nproc_per_node=4", "--no_python"}, "./train.sh", []string{"x"},
			[]string{"torchrun", "--nproc_per_node=4", "--no_python", "--max_restarts=0", "--monitor_interval=0.1", testGorun, "_rank", "--no-python", "--", "./train.sh", "x"},
			"0-1;2-3;4-5;6-7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Build(newSpec(tt.given, tt.script, tt.args...), facts)
			if err != nil {
				t.Fatal(err)
			}
			n := p.Nodes[0]
			if !slices.Equal(n.Command, tt.want) {
				t.Errorf("command = %q\nwant      %q", n.Command, tt.want)
			}
			if got := n.Env[wire.RankCPUsVar].Value; got != tt.wantVar {
				t.Errorf("%s = %q, want %q", wire.RankCPUsVar, got, tt.wantVar)
			}
		})
	}
}

// TestWrapWithoutFacts: with preflight off the head does not know where
// gorun is on a node, so the command names it for the node's agent.
func TestWrapWithoutFacts(t *testing.T) {
	p, err := Build(newSpec([]string{"--nproc_per_node=2"}, "train.py"), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := p.Nodes[0]
	want := []string{"torchrun", "--nproc_per_node=2", "--max_restarts=0", "--monitor_interval=0.1", "--no_python", wire.SelfArg, "_rank", "--", "train.py"}
	if !slices.Equal(n.Command, want) {
		t.Fatalf("command = %q, want %q", n.Command, want)
	}
	if _, ok := n.Env[wire.RankCPUsVar]; ok {
		t.Fatalf("bound without facts: %+v", n.Env[wire.RankCPUsVar])
	}
}

// TestNoWrapWithRunPath: --run-path runs the script inside torchrun's own
// processes, so there is nothing to put a supervisor in front of.
func TestNoWrapWithRunPath(t *testing.T) {
	p, err := Build(newSpec([]string{"--nproc_per_node=2", "--run_path"}, "train.py"), Facts{"localhost": {CPUs: "0-7", Gorun: testGorun}})
	if err != nil {
		t.Fatal(err)
	}
	if n := p.Nodes[0]; slices.Contains(n.Command, "_rank") {
		t.Fatalf("wrapped with --run-path: %q", n.Command)
	}
}
