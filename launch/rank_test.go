package launch

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/envplan"
)

func TestRankCPUs(t *testing.T) {
	tests := []struct {
		lists, rank string
		want        []int
		err         bool
	}{
		{"", "0", nil, false},
		{"0-1;2-3", "1", []int{2, 3}, false},
		{"0,4;", "1", nil, false},
		{"0-1;2-3", "2", nil, true},
		{"0-1", "x", nil, true},
		{"0-1;zz", "1", nil, true},
	}
	for _, tt := range tests {
		got, err := rankCPUs(tt.lists, tt.rank)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("rankCPUs(%q, %q) = %v, %v; want %v, err %v", tt.lists, tt.rank, got, err, tt.want, tt.err)
		}
	}
}

// TestExecRankBinds re-executes the test binary as the hook, which execs a
// shell that reports its own CPU affinity.
func TestExecRankBinds(t *testing.T) {
	if os.Getenv("GORUN_TEST_EXEC_RANK") == "1" {
		err := ExecRank([]string{"--", "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"}, os.Getenv)
		t.Fatalf("ExecRank returned: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExecRankBinds$")
	cmd.Env = append(os.Environ(), "GORUN_TEST_EXEC_RANK=1", "LOCAL_RANK=1", envplan.RankCPUsVar+"=0;0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[1] != "0" {
		t.Fatalf("worker affinity: %q, want CPU 0", out)
	}
}
