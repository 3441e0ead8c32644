package rank

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestWorkerCommand(t *testing.T) {
	env := map[string]string{"PYTHON_EXEC": "/bin/sh"} // any executable stands in for Python
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name string
		args []string
		want []string // the worker's argv; nil: an error
	}{
		{"script", []string{"--", "train.py", "--lr", "3"}, []string{"/bin/sh", "-u", "train.py", "--lr", "3"}},
		{"module", []string{"-m", "--", "pkg.train"}, []string{"/bin/sh", "-u", "-m", "pkg.train"}},
		{"no python", []string{"--no-python", "--", "/bin/true", "x"}, []string{"/bin/true", "x"}},
		{"not on the PATH", []string{"--no-python", "--", "/nonexistent/gorun-test-worker"}, nil},
		{"unknown option", []string{"--bogus", "--", "x"}, nil},
		{"nothing to run", []string{"--"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, _, err := workerCommand(tt.args, getenv)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("workerCommand(%q) = %q, want an error", tt.args, cmd.Args)
				}
				return
			}
			if err != nil {
				t.Fatalf("workerCommand(%q): %v", tt.args, err)
			}
			if !slices.Equal(cmd.Args, tt.want) {
				t.Errorf("argv %q, want %q", cmd.Args, tt.want)
			}
			if a := cmd.SysProcAttr; a == nil || !a.Setpgid || a.Pdeathsig != syscall.SIGKILL {
				t.Errorf("SysProcAttr %+v: want its own process group and a parent-death SIGKILL", a)
			}
		})
	}
}

func TestIsStopSignal(t *testing.T) {
	for _, s := range forwardedSignals() {
		want := s == syscall.SIGTERM || s == syscall.SIGINT || s == syscall.SIGHUP || s == syscall.SIGQUIT
		if got := isStopSignal(s); got != want {
			t.Errorf("isStopSignal(%v) = %v, want %v", s, got, want)
		}
	}
}

// TestInterpreterRelative: a parent started as a relative path to Python
// is that path from its working directory; a parent that is no Python at
// all gives python3.
func TestInterpreterRelative(t *testing.T) {
	if os.Getenv("GORUN_TEST_PRINT_INTERPRETER") == "1" {
		os.Stdout.WriteString(interpreter(os.Getenv, os.Getppid()))
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", `"$0" -test.run=^TestInterpreterRelative$; true`, os.Args[0])
	cmd.Args[0] = "venv/bin/python3"
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GORUN_TEST_PRINT_INTERPRETER=1", "PYTHON_EXEC=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "venv/bin/python3"); string(out) != want {
		t.Errorf("interpreter = %q, want %q", out, want)
	}
	if got := interpreter(func(string) string { return "" }, os.Getpid()); got != "python3" {
		t.Errorf("the test binary as the parent: %q, want python3", got)
	}
}
