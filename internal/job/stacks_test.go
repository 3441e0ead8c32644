package job

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gorun/gorun/internal/pystack"
	"github.com/gorun/gorun/launch"
)

// TestHangStacksFiles: one file per rank, named by rank and padded, and
// the summary, under DIR/attempt-K/stacks; the run's folder is found only
// when no --flight-recorder folder is given.
func TestHangStacksFiles(t *testing.T) {
	for _, fr := range []bool{true, false} {
		base := t.TempDir()
		h := newHangStacks("", "")
		if fr {
			h.dir = base
		}
		asked := false
		h.runDir = func() (string, error) { asked = true; return filepath.Join(base, "runs", "id"), nil }
		var o launch.Options
		h.Configure(&o)
		ranks := []launch.RankStacks{
			{Node: "node0", Rank: 0, LocalRank: 0, Dump: &pystack.Dump{Tool: pystack.ToolFaulthandler, Text: "Fatal Python error: Aborted\n"}},
			{Node: "node1", Rank: 10, LocalRank: 0},
		}
		dir, err := o.SaveStacks(2, ranks, []string{"gorun: hang: stuck: node1 rank 10\n"})
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(base, "attempt-2", "stacks")
		if !fr {
			want = filepath.Join(base, "runs", "id", "attempt-2", "stacks")
		}
		if dir != want || asked == fr {
			t.Errorf("flight recorder %v: dir %s (run folder asked: %v), want %s", fr, dir, asked, want)
		}
		for name, content := range map[string]string{
			"rank-00.txt": "# node0 rank 0 (local rank 0), stacks by faulthandler\n\nFatal Python error: Aborted\n",
			"rank-10.txt": "# node1 rank 10 (local rank 0): no stacks came in time\n",
			"summary.txt": "gorun: hang: stuck: node1 rank 10\n",
		} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || string(b) != content {
				t.Errorf("%s = %q (%v), want %q", name, b, err, content)
			}
		}
	}
}
