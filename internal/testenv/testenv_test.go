package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNeed runs the helper process below in each mode and reads its verdict.
func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		name, e2e string
		ok        bool
		want      string // in go test -v's output
		fails     bool
	}{
		{name: "present", e2e: "", ok: true, want: "--- PASS"},
		{name: "present under e2e", e2e: "1", ok: true, want: "--- PASS"},
		{name: "missing skips", e2e: "", want: "skipping: chromium is not installed"},
		{name: "missing skips unless GORUN_E2E is exactly 1", e2e: "true", want: "--- SKIP"},
		{name: "missing fails under e2e", e2e: "1", want: "GORUN_E2E=1 but chromium is not installed", fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNeed$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTENV_HELPER=1", "GORUN_E2E="+tc.e2e)
			if tc.ok {
				cmd.Env = append(cmd.Env, "TESTENV_OK=1")
			}
			out, err := cmd.CombinedOutput()
			if (err != nil) != tc.fails {
				t.Errorf("err = %v, want failure %v\n%s", err, tc.fails, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestHelperNeed is the helper process of TestNeed.
func TestHelperNeed(t *testing.T) {
	if os.Getenv("TESTENV_HELPER") != "1" {
		t.Skip("helper process of TestNeed")
	}
	Need(t, os.Getenv("TESTENV_OK") == "1", "chromium is not installed")
}
