package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/buildinfo"
	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
)

// The tests in this file call the command line in process (newApp), for
// what needs no node: help, version, hosts, dry runs, the topology
// explainer, and the one error → exit-code switch.

// app runs `gorun args...` in process and returns its stdout and error.
func app(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := newApp(nil)
	a.Writer, a.ErrWriter = &out, &errOut
	err := a.Run(append([]string{"gorun"}, args...))
	return out.String(), err
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
		sig  syscall.Signal // the stop signal gorun got
	}{
		{nil, exitOK, 0},
		{cmdline.ErrHelp, exitOK, 0},
		{&launch.JobFailed{Failure: launch.Failure{Code: 7}}, 7, 0},
		{&launch.JobFailed{Failure: launch.Failure{Code: launch.ExitHang}}, exitHang, 0},
		{&launch.JobFailed{Failure: launch.Failure{Code: -1}}, exitFailure, 0},
		{fmt.Errorf("prepare attempt 2: %w", launch.ErrInterrupted), exitInterrupted, 0},
		{fmt.Errorf("stopped 3 of 3 nodes: %w", launch.ErrInterrupted), 143, syscall.SIGTERM},
		{fmt.Errorf("stopped 3 of 3 nodes: %w", launch.ErrInterrupted), 130, syscall.SIGINT},
		{fmt.Errorf("stopped 3 of 3 nodes: %w", launch.ErrInterrupted), 129, syscall.SIGHUP},
		{cli.Exit("", 9), 9, 0},
		{fmt.Errorf("prepare attempt 2: recheck: %w: only 1 node", job.ErrRecheckFailed), exitNode, 0},
		{fmt.Errorf("prepare attempt 2: %w", job.ErrGPUNotFreed), exitNode, 0},
		{&userr.InputError{Where: "x", Problem: "y"}, exitUsage, 0},
		{job.ErrPreflightFailed, exitNode, 0},
		{job.ErrPreflightInput, exitUsage, 0},
		{fmt.Errorf("%w: node a", job.ErrUnreachable), exitNode, 0},
		{fmt.Errorf("%w: known_hosts", job.ErrSSHSettings), exitUsage, 0},
		{preflight.ErrBadCapture, exitUsage, 0},
		{fmt.Errorf("telemetry: %w: disk full", job.ErrOutput), exitFailure, 0},
		{errors.New("anything else"), exitFailure, 0},
	} {
		if got := exitCode(tc.err, io.Discard, tc.sig); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stdout
		err  bool   // an input error (exit 2)
	}{
		{[]string{"help"}, "gorun options:", false},
		{[]string{"--help"}, "gorun options:", false},
		{[]string{"help", "-h"}, "gorun options:", false},
		{[]string{"help", "help"}, "gorun options:", false},
		{[]string{"help", "preflight"}, "usage: gorun preflight", false},
		{[]string{"preflight", "--help"}, "usage: gorun preflight", false},
		{[]string{"help", "hosts"}, "usage: gorun hosts", false},
		{[]string{"hosts", "--help"}, "usage: gorun hosts", false},
		{[]string{"help", "version"}, "usage: gorun version", false},
		{[]string{"version", "-h"}, "usage: gorun version", false},
		{[]string{"version"}, "gorun ", false},
		{[]string{"help", "bogus"}, "", true},
		{[]string{"help", "--torchrun", "x"}, "", true},
		{[]string{"version", "x"}, "", true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := app(t, tc.args...)
			var input *userr.InputError
			if tc.err != errors.As(err, &input) || (!tc.err && err != nil) {
				t.Fatalf("err = %v, want an input error: %v", err, tc.err)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("stdout lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestHostsCommand(t *testing.T) {
	dir := t.TempDir()
	hostfile := filepath.Join(dir, "hostfile")
	os.WriteFile(hostfile, []byte("node1 slots=2\nnode2 slots=2\n"), 0o644)
	out, err := app(t, "hosts", "--hosts", "a:8,b:8")
	if err != nil || out != "a\tslots=8\tgpus=all\nb\tslots=8\tgpus=all\n" {
		t.Errorf("hosts --hosts: %q, %v", out, err)
	}
	out, err = app(t, "hosts", "--hostfile="+hostfile, "--include", "node2:1", "--json")
	if err != nil || !strings.Contains(out, `"node2"`) || strings.Contains(out, `"node1"`) {
		t.Errorf("hosts --hostfile --include --json: %q, %v", out, err)
	}
	t.Setenv("SLURM_JOB_NODELIST", "")
	for _, bad := range [][]string{{"hosts"}, {"hosts", "--json"}, {"hosts", "--bogus"}, {"hosts", "--hosts"}, {"hosts", "--hostfile", filepath.Join(dir, "missing")}, {"hosts", "x"}} {
		var input *userr.InputError
		if _, err := app(t, bad...); !errors.As(err, &input) {
			t.Errorf("%q: %v, want an input error", bad, err)
		}
	}
}

func TestLaunchDryRunInProcess(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	os.WriteFile("train.py", nil, 0o644)
	out, err := app(t, "--dry-run", "--preflight", "off", "--format", "json", "--nproc-per-node", "2", "train.py")
	if err != nil || !strings.Contains(out, `"nproc_per_node"`) {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	if _, err := app(t, "--nnodes", "2:1", "train.py"); exitCode(err, io.Discard, 0) != exitUsage {
		t.Errorf("bad --nnodes: %v", err)
	}
}

func TestPreflightTopoFile(t *testing.T) {
	topo, err := filepath.Glob("preflight/testdata/topo/*")
	if err != nil || len(topo) == 0 {
		t.Skip("no saved topology in preflight/testdata/topo")
	}
	out, err := app(t, "preflight", "--topo-file", topo[0])
	if err != nil && !errors.Is(err, job.ErrPreflightFailed) && !errors.Is(err, preflight.ErrBadCapture) {
		t.Fatalf("preflight --topo-file: %v", err)
	}
	if out == "" {
		t.Error("nothing printed")
	}
	if out, _ := app(t, "preflight", "--json", "--topo-file", topo[0]); !strings.HasPrefix(out, "{") {
		t.Errorf("--json: %.100s", out)
	}
	for _, bad := range [][]string{{"preflight", "--topo-file", ""}, {"preflight", "--topo-file"}, {"preflight", "--topo-file", topo[0], "x.py"},
		{"preflight", "--bandwidth", "some"}, {"preflight", "--bandwidth"}, {"preflight", "--topo-file", "/nonexistent"}} {
		if _, err := app(t, bad...); exitCode(err, io.Discard, 0) != exitUsage {
			t.Errorf("%q: %v, want exit 2", bad, err)
		}
	}
}

func TestVersionString(t *testing.T) {
	if v := buildinfo.Version(); v == "" || strings.Contains(v, "(devel)") {
		t.Errorf("version() = %q", v)
	}
}
