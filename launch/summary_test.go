package launch

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

func TestRenderSummary(t *testing.T) {
	tests := []struct {
		name     string
		f        Failure
		attempts int
	}{
		{"worker exit", Failure{Node: "node2", Rank: 3, LocalRank: 1, Code: 7,
			Reason:    "exit 1: worker rank 3 (local rank 1) exited with 7",
			LastLines: []string{"[node2 1] Traceback (most recent call last):", "[node2 1] SystemExit: 7", "[node2]   exitcode  : 7 (pid: 1235)"}}, 3},
		{"node lost", Failure{Node: "gpu-b07", Rank: -1, LocalRank: -1, Code: -1,
			Reason: "node lost: heartbeat missed for 6s"}, 1},
		{"torchrun exit", Failure{Node: "node1", Rank: -1, LocalRank: -1, Code: 1, Reason: "exit 1",
			LastLines: []string{"[node1] torch.distributed.DistStoreError: Timed out after 61 seconds waiting for clients. 1/2 clients joined."}}, 2},
		{"escapes quoted", Failure{Node: "node1", Rank: 0, LocalRank: 0, Code: 3, Reason: "exit 3: \x1b]0;title\x07",
			LastLines: []string{"[node1 0] boom \x1b[2J\x1b]0;title\x07 cleared\r 50%\u202e", "[node1 0] bad byte \xff"}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := renderSummary(tt.f, tt.attempts)
			golden := filepath.Join("testdata", "summary_"+strings.ReplaceAll(tt.name, " ", "_")+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("summary differs from %s:\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}
