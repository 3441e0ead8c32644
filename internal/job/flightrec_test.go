package job

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/sshexec"
)

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for name, body := range files {
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	w.Close()
	return b.Bytes()
}

func TestUntar(t *testing.T) {
	dst := t.TempDir()
	n, err := untar(tarOf(t, map[string]string{"./nccl_trace_rank_0": "a", "nccl_trace_rank_1": "bb", "sub/rank_2": "c"}), dst)
	if err != nil || n != 3 {
		t.Fatalf("untar = %d, %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "nccl_trace_rank_1")); string(b) != "bb" {
		t.Errorf("content %q", b)
	}
	for _, bad := range []string{"../escape", "/etc/escape", "a/../../escape", ".."} {
		if _, err := untar(tarOf(t, map[string]string{bad: "x"}), t.TempDir()); err == nil || !strings.Contains(err.Error(), "leaves the folder") {
			t.Errorf("%q: %v, want refused", bad, err)
		}
	}
	if _, err := untar([]byte("not a tar archive, but long enough to be read as a header block..."), t.TempDir()); err == nil {
		t.Error("garbage read as a tar archive")
	}
}

// dumpsNode is a node whose flight-recorder folder holds files.
func dumpsNode(t *testing.T, name string, files map[string]string) *fakeRunner {
	archive := tarOf(t, files)
	return &fakeRunner{name: name, output: func(argv []string) ([]byte, error) {
		if strings.Contains(argv[2], "tar -cf") {
			return archive, nil
		}
		return nil, nil
	}}
}

func cleared(r *fakeRunner) bool {
	for _, c := range r.commands {
		if strings.Contains(c, "rm -rf") {
			return true
		}
	}
	return false
}

func TestFlightRecorderGather(t *testing.T) {
	dir := t.TempDir()
	a := dumpsNode(t, "a", map[string]string{"nccl_trace_rank_0": "x", "nccl_trace_rank_1": "y"})
	empty := &fakeRunner{name: "b"} // no worker wrote there: tar's output is empty
	lost := &fakeRunner{name: "c", output: func([]string) ([]byte, error) { return nil, errors.New("connection lost") }}
	var diag bytes.Buffer
	fr := &flightRecorder{dir: dir, runID: "r1", diag: &diag,
		runners: map[string]sshexec.Runner{"a": a, "b": empty, "c": lost}}
	plan := envplan.Plan{Nodes: []envplan.NodePlan{{Host: "a"}, {Host: "b"}, {Host: "c"}, {Host: "gone"}}}

	if err := fr.BeforeAttempt(context.Background(), &Attempt{K: 0, Plan: plan}); err != nil || len(a.commands) != 0 {
		t.Fatalf("attempt 0: nothing to gather, yet %v, %q", err, a.commands)
	}
	fr.BeforeAttempt(context.Background(), &Attempt{K: 1, Plan: plan})
	if b, err := os.ReadFile(filepath.Join(dir, "attempt-0", "a", "nccl_trace_rank_1")); err != nil || string(b) != "y" {
		t.Errorf("a's dump: %q, %v", b, err)
	}
	if !cleared(a) || cleared(empty) || cleared(lost) {
		t.Errorf("cleared: a %v (want true), b %v, c %v (want false)", cleared(a), cleared(empty), cleared(lost))
	}
	out := diag.String()
	for _, want := range []string{"2 dumps from 1 nodes of attempt 1", "c: connection lost (the dumps stay in " + envplan.FlightRecorderDir("r1", "c")} {
		if !strings.Contains(out, want) {
			t.Errorf("diag lacks %q:\n%s", want, out)
		}
	}

	// After the run: the last attempt's dumps.
	a.commands = nil
	fr.Finish(context.Background(), &Attempt{Plan: plan}, launch.Result{Attempts: 3}, nil)
	if _, err := os.Stat(filepath.Join(dir, "attempt-2", "a")); err != nil {
		t.Errorf("the last attempt's dumps: %v", err)
	}
}

// TestFlightRecorderKeepsDumpsItCannotWrite: the node's folder is removed
// only once the head holds its dumps.
func TestFlightRecorderKeepsDumpsItCannotWrite(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "attempt-0")
	os.WriteFile(blocker, []byte("a file where a folder must go"), 0o644)
	a := dumpsNode(t, "a", map[string]string{"nccl_trace_rank_0": "x"})
	var diag bytes.Buffer
	fr := &flightRecorder{dir: dir, runID: "r1", diag: &diag, runners: map[string]sshexec.Runner{"a": a}}
	fr.gather(context.Background(), 0, envplan.Plan{Nodes: []envplan.NodePlan{{Host: "a"}}})
	if cleared(a) {
		t.Errorf("the node's dumps were removed though the head could not write them: %q", a.commands)
	}
	if !strings.Contains(diag.String(), "the dumps stay in") {
		t.Errorf("diag = %q", diag.String())
	}

	// Written, but the node's folder cannot be cleared: said, with where
	// the copies are.
	b := dumpsNode(t, "b", map[string]string{"nccl_trace_rank_0": "x"})
	inner := b.output
	b.output = func(argv []string) ([]byte, error) {
		if strings.Contains(argv[2], "rm -rf") {
			return nil, errors.New("permission denied")
		}
		return inner(argv)
	}
	if _, err := fetchDumps(context.Background(), b, "/tmp/x", filepath.Join(t.TempDir(), "b")); err == nil || !strings.Contains(err.Error(), "could not clear") {
		t.Errorf("clear failure: %v", err)
	}
}
