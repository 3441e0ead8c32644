package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
)

// The tests in this file run whole jobs in local mode with the real gorun
// binary as the node agent (built once by TestMain) and a fake torchrun:
// a shell script that writes down each start and exits with the code a
// file gives for that attempt.

var gorunBin string // set once by TestMain, read-only after

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gorun-job-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gorunBin = filepath.Join(dir, "gorun")
	if out, err := exec.Command("go", "build", "-o", gorunBin, "github.com/gorun/gorun").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// localJob is a working directory with train.py and a fake torchrun on
// the PATH that exits with codes[k] on its k-th start (0 after them).
type localJob struct {
	dir, starts string
}

func newLocalJob(t *testing.T, codes ...int) *localJob {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	j := &localJob{dir: dir, starts: filepath.Join(dir, "starts")}
	var cases strings.Builder
	for k, c := range codes {
		fmt.Fprintf(&cases, "  %d) exit %d ;;\n", k+1, c)
	}
	script := "#!/bin/sh\necho \"$*\" >> " + j.starts + "\nn=$(wc -l < " + j.starts + ")\necho \"[default0]:attempt $n\"\ncase $n in\n" + cases.String() + "esac\nexit 0\n"
	os.WriteFile(filepath.Join(bin, "torchrun"), []byte(script), 0o755)
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("print('hi')\n"), 0o644)
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Chdir(dir)
	return j
}

func (j *localJob) startCount() int {
	b, _ := os.ReadFile(j.starts)
	return strings.Count(string(b), "\n")
}

func (j *localJob) config(t *testing.T, args ...string) Config {
	t.Helper()
	cl, err := cmdline.Parse(args, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Args: args, CommandLine: cl, Getenv: os.Getenv, Environ: map[string]string{"PATH": os.Getenv("PATH")},
		Self: gorunBin, Dir: j.dir, RunID: "test", LookPath: exec.LookPath}
}

func testUI() (UI, *bytes.Buffer, *bytes.Buffer) {
	var out, diag bytes.Buffer
	return UI{Out: &out, Err: &diag}, &out, &diag
}

// TestRunRestartsAndWritesOutputs: attempt 1 fails, the group restarts,
// attempt 2 succeeds; the report, the JSONL and the summary are written.
func TestRunRestartsAndWritesOutputs(t *testing.T) {
	j := newLocalJob(t, 3, 0)
	cfg := j.config(t, "--preflight", "off", "--max-restarts", "1", "--report", "r.html", "--telemetry", "t.jsonl",
		"--telemetry-interval", "200ms", "--summary", "s.json", "train.py")
	ui, out, diag := testUI()
	if err := Run(context.Background(), cfg, ui); err != nil {
		t.Fatalf("Run: %v\n%s", err, diag)
	}
	if n := j.startCount(); n != 2 {
		t.Errorf("torchrun started %d times, want 2", n)
	}
	if !strings.Contains(out.String(), "attempt 2") {
		t.Errorf("stdout = %q", out)
	}
	if !strings.Contains(diag.String(), "restarting the whole group (attempt 2 of 2)") {
		t.Errorf("diag = %s", diag)
	}
	html, err := os.ReadFile(filepath.Join(j.dir, "r.html"))
	if err != nil || !strings.Contains(string(html), "attempt 2 starts") || !strings.Contains(string(html), "restart after attempt 1: failure seen, stopped") {
		t.Errorf("report: %v, or no attempt or restart timeline in it", err)
	}
	if _, err := os.Stat(filepath.Join(j.dir, "t.jsonl")); err != nil {
		t.Errorf("JSONL: %v", err)
	}
	sum := readSummary(t, filepath.Join(j.dir, "s.json"))
	if sum.Outcome != "succeeded" || sum.ExitCode == nil || *sum.ExitCode != 0 || sum.Attempts != 2 || sum.RunID != "test" ||
		len(sum.Failures) != 1 || sum.Failures[0].Attempt != 1 || sum.Failures[0].Code != 3 || len(sum.Restarts) != 1 ||
		sum.Nodes[0] != "localhost" || sum.WorldSize != 1 {
		t.Errorf("summary: %+v", sum)
	}
	if len(sum.Restarts) == 1 {
		r := sum.Restarts[0]
		if r.AfterAttempt != 1 || len(r.Milestones) < 2 || r.Milestones[0].Name != "stopped" || r.Longest == "" ||
			!strings.HasPrefix(r.Line, "gorun: restart after attempt 1: failure seen, stopped +") {
			t.Errorf("restart: %+v", r)
		}
		for i := 1; i < len(r.Milestones); i++ {
			if r.Milestones[i].AtMS < r.Milestones[i-1].AtMS {
				t.Errorf("milestones out of order: %+v", r.Milestones)
			}
		}
	}
}

func readSummary(t *testing.T, path string) Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sum Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return sum
}

// TestRunJobFailure: torchrun's exit code is the run's, and the summary
// says so.
func TestRunJobFailure(t *testing.T) {
	j := newLocalJob(t, 5)
	ui, _, _ := testUI()
	err := Run(context.Background(), j.config(t, "--preflight", "off", "--telemetry-interval", "0", "--summary", "s.json", "train.py"), ui)
	var failed *launch.JobFailed
	if !errors.As(err, &failed) || failed.ExitCode() != 5 {
		t.Errorf("Run = %v, want torchrun's exit 5", err)
	}
	sum := readSummary(t, filepath.Join(j.dir, "s.json"))
	if sum.Outcome != "failed" || sum.ExitCode == nil || *sum.ExitCode != 5 || len(sum.Failures) != 1 || len(sum.Restarts) != 0 || sum.Error == "" {
		t.Errorf("summary: %+v", sum)
	}
}

// TestRunRefusesBeforeStarting: bad input, refused outputs and a dry run
// start nothing.
func TestRunRefusesBeforeStarting(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing script", []string{"--preflight", "off", "missing.py"}, "training script"},
		{"a mistyped command", []string{"--preflight", "off", "preflght"}, "did you mean `gorun preflight`?"},
		{"the report over the script", []string{"--preflight", "off", "--report", "train.py", "train.py"}, "is also training script"},
		{"the summary over the report", []string{"--preflight", "off", "--report", "r.html", "--summary", "r.html", "train.py"}, "is also --report"},
		{"the summary in a directory", []string{"--preflight", "off", "--summary", ".", "train.py"}, "is a directory"},
		{"the telemetry over the script", []string{"--preflight", "off", "--telemetry", "train.py", "train.py"}, "is also training script"},
		{"a flight recorder in a file", []string{"--preflight", "off", "--flight-recorder", "train.py", "train.py"}, "is a file"},
		{"srun outside an allocation", []string{"--launcher", "srun", "train.py"}, "not inside a Slurm allocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newLocalJob(t)
			ui, _, _ := testUI()
			err := Run(context.Background(), j.config(t, tc.args...), ui)
			var input *userr.InputError
			if !errors.As(err, &input) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an input error saying %q", err, tc.want)
			}
			if j.startCount() != 0 {
				t.Error("torchrun was started")
			}
			if b, _ := os.ReadFile(filepath.Join(j.dir, "train.py")); string(b) != "print('hi')\n" {
				t.Errorf("the script was changed: %q", b)
			}
		})
	}
}

func TestRunDryRun(t *testing.T) {
	j := newLocalJob(t)
	for _, format := range []string{"table", "json", "shell"} {
		ui, out, _ := testUI()
		if err := Run(context.Background(), j.config(t, "--dry-run", "--preflight", "off", "--format", format, "train.py"), ui); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "train.py") {
			t.Errorf("%s plan: %q", format, out)
		}
	}
	// With preflight, the plan comes from the node's facts.
	ui, out, diag := testUI()
	if err := Run(context.Background(), j.config(t, "--dry-run", "--preflight", "warn", "train.py"), ui); err != nil {
		t.Fatalf("%v\n%s", err, diag)
	}
	if !strings.Contains(out.String(), "torchrun") || j.startCount() != 0 {
		t.Errorf("dry run with preflight: %q, %d starts", out, j.startCount())
	}
}

func TestPreflightLocal(t *testing.T) {
	j := newLocalJob(t)
	ui, _, _ := testUI()
	report, err := Preflight(context.Background(), j.config(t, "train.py"), ui)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Nodes) != 1 || report.Nodes[0].Host != "localhost" {
		t.Errorf("report nodes: %+v", report.Nodes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Preflight(ctx, j.config(t, "train.py"), ui); !errors.Is(err, launch.ErrInterrupted) {
		t.Errorf("cancelled preflight: %v", err)
	}
}

func TestSlurmStep(t *testing.T) {
	args := []string{"--nnodes", "3", "--rdzv-backend", "static", "--master-addr", "n0", "train.py"}
	cl := parse(t, args...)
	step := map[string]string{"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0", "SLURM_NODEID": "2"}
	got, err := slurmStep(Config{Args: args, CommandLine: cl, Getenv: env(step)})
	if err != nil || got.Torchrun.NodeRank != 2 {
		t.Errorf("a task of srun gorun: node rank %d, %v; want 2", got.Torchrun.NodeRank, err)
	}
	got, _ = slurmStep(Config{Args: args, CommandLine: cl, Getenv: env(map[string]string{"SLURM_JOB_ID": "9"})})
	if got.Set("node_rank") {
		t.Error("outside a step the node rank was set")
	}
}
