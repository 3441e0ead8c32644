package job

import (
	"testing"

	"github.com/gorun/gorun/cmdline"
)

// TestNodePaths: the collector runs in the agent's directory, the job in
// the head's, so relative paths reach the nodes made absolute there.
func TestNodePaths(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		torchrun, script string
	}{
		{[]string{"train.py"}, "", "/job/train.py"},
		{[]string{"/abs/train.py"}, "", "/abs/train.py"},
		{[]string{"--torchrun", "venv/bin/torchrun", "sub/train.py"}, "/job/venv/bin/torchrun", "/job/sub/train.py"},
		{[]string{"--torchrun", "torchrun --some-option", "train.py"}, "torchrun --some-option", "/job/train.py"},
		{[]string{"--torchrun", "./tr --x 1", "train.py"}, "/job/tr --x 1", "/job/train.py"},
		{[]string{"-m", "pkg.train"}, "", ""},
		{[]string{"--no-python", "bash", "-c", "true"}, "", "bash"},
		{[]string{"--no-python", "./run.sh"}, "", "/job/run.sh"},
	} {
		cl, err := cmdline.Parse(tc.args, func(string) string { return "" })
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		torchrun, script := nodePaths("/job", cl)
		if want := tc.torchrun; want != "" && torchrun != want || want == "" && torchrun != cl.Gorun.Torchrun {
			t.Errorf("%q: torchrun %q, want %q", tc.args, torchrun, want)
		}
		if script != tc.script {
			t.Errorf("%q: script %q, want %q", tc.args, script, tc.script)
		}
	}
}
