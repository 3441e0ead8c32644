package testenv

import (
	"fmt"
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

// recorder is a testing.TB that writes down what Need asked of it.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recorder) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

// TestNeedInProcess: the same rule, seen from the calls Need makes.
func TestNeedInProcess(t *testing.T) {
	for _, tc := range []struct {
		e2e         string
		ok          bool
		fatal, skip bool
	}{
		{"", true, false, false}, {"1", true, false, false},
		{"", false, false, true}, {"true", false, false, true}, {"1", false, true, false},
	} {
		t.Setenv("GORUN_E2E", tc.e2e)
		r := &recorder{}
		Need(r, tc.ok, "pandas is not installed")
		// A real Fatalf ends the test; this one returns, so a fatal case is
		// judged by its Fatalf alone.
		if tc.fatal && r.fatal == "" || !tc.fatal && (r.fatal != "" || (r.skip != "") != tc.skip) {
			t.Errorf("GORUN_E2E=%q ok=%v: fatal %q, skip %q", tc.e2e, tc.ok, r.fatal, r.skip)
		}
	}
}
