package envplan

import (
	"slices"
	"testing"
)

func TestBindWorkers(t *testing.T) {
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
			[]string{"torchrun", "--nproc_per_node=2", "--no_python", testGorun, "_rank", "--", testPython, "-u", "train.py", "--lr", "1"},
			"0-3;4-7"},
		{"module: the hook runs python -m, torchrun gets no --module", []string{"--nproc_per_node=2", "--module"}, "pkg.train", nil,
			[]string{"torchrun", "--nproc_per_node=2", "--no_python", testGorun, "_rank", "--", testPython, "-u", "-m", "pkg.train"},
			"0-3;4-7"},
		{"no-python: the hook runs the program itself", []string{"--nproc_per_node=4", "--no_python"}, "./train.sh", []string{"x"},
			[]string{"torchrun", "--nproc_per_node=4", "--no_python", testGorun, "_rank", "--", "./train.sh", "x"},
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
			if got := n.Env[RankCPUsVar].Value; got != tt.wantVar {
				t.Errorf("%s = %q, want %q", RankCPUsVar, got, tt.wantVar)
			}
		})
	}
}

func TestNoBindingWithoutInterpreter(t *testing.T) {
	p, err := Build(newSpec([]string{"--nproc_per_node=2"}, "train.py"), Facts{"localhost": {CPUs: "0-7", Gorun: testGorun}})
	if err != nil {
		t.Fatal(err)
	}
	n := p.Nodes[0]
	if _, ok := n.Env[RankCPUsVar]; ok || n.Ranks[0].CPUs != "" || slices.Contains(n.Command, "_rank") {
		t.Fatalf("bound without knowing the interpreter: %q %+v", n.Command, n.Ranks)
	}
	if !hasNote(p, NoteWarn, "interpreter") {
		t.Fatalf("no note says why: %+v", p.Notes)
	}
}
