package sshexec

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// gatedScript is a job that stands for torchrun and its worker's
// supervisor: it connects to the relay, notes that it did, and, gated,
// waits for wire.RelayGo before it notes its release and prints.
const gatedScript = `#!/usr/bin/python3
import os, socket, sys
mark = os.environ["MARKS"]
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["GORUN_AGENT_SOCK"])
open(os.path.join(mark, "connected"), "w").close()
if os.environ.get("GORUN_GATED") == "1":
    if s.recv(1) != b"G":
        sys.exit(9)
open(os.path.join(mark, "released"), "w").close()
print("ran", os.environ.get("FOO"), "gated", os.environ.get("GORUN_GATED"), flush=True)
`

// aheadJob is a warm job running gatedScript; marks is its folder of
// marks.
func aheadJob(t *testing.T) (job wire.Job, marks string) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "job.py")
	if err := os.WriteFile(script, []byte(gatedScript), 0o755); err != nil {
		t.Fatal(err)
	}
	marks = filepath.Join(dir, "marks")
	os.Mkdir(marks, 0o755)
	return wire.Job{Argv: []string{script}, Env: map[string]string{"FOO": "1", "MARKS": marks}, Dir: dir, Relay: true,
		Preimport: []string{"json"}}, marks
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// waitFor polls for path, up to d.
func waitFor(path string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if exists(path) {
			return true
		}
	}
	return exists(path)
}

// TestHandAhead: a job handed ahead starts at once (its program runs and
// reaches the relay) but its gated part waits; the agent still answers
// asks; a Start with the same job releases it, and its output and exit
// are the job's, warm, and the agent says it released it. One handed
// ahead per standby.
func TestHandAhead(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	l.agentEnv = append(l.agentEnv, testAgentOutputEnv+"=1")
	ctx := context.Background()
	job, marks := aheadJob(t)
	if err := l.Warm(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitAskReady(t, &l.warm)
	next := job
	next.Env = map[string]string{"FOO": "2", "MARKS": marks}
	if !l.HandAhead(next) {
		t.Fatal("HandAhead: not handed, with an agent on standby")
	}
	if l.HandAhead(next) {
		t.Error("a second HandAhead to the same standby was taken")
	}
	if !waitFor(filepath.Join(marks, "connected"), 10*time.Second) {
		t.Fatal("the job handed ahead never started")
	}
	time.Sleep(200 * time.Millisecond)
	if exists(filepath.Join(marks, "released")) {
		t.Fatal("the gated job ran on before the release")
	}
	out, err := l.AgentOutput(ctx, "_parent")
	if err != nil || !strings.Contains(string(out), wire.AgentCommand) {
		t.Errorf("an ask while handed ahead: %q, %v; want it answered by the agent", out, err)
	}
	var f frames
	if code := runWarm(t, l, next, &f); code != 0 {
		t.Errorf("exit %d, want 0\n%s", code, f.out.String())
	}
	if got := f.out.String(); got != "ran 2 gated 1\n" {
		t.Errorf("the released job printed %q", got)
	}
	if len(f.start) != 2 || !f.start[0].Warm || !f.start[1].Released {
		t.Errorf("start frames %+v, want one warm (held from before the release), then the release", f.start)
	}
}

// TestHandAheadReleasedAtOnce: a job handed ahead and released at once,
// both on their way to an agent on standby that is still starting (a
// start-up crash, with the standby started as the attempt stops), is
// released all the same: the release, read before the agent took the
// job, is kept for it. Each round would lose the release one time in two
// if the agent dropped it.
func TestHandAheadReleasedAtOnce(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	job, _ := aheadJob(t)
	for round := range 4 {
		if err := l.Warm(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		if !l.HandAhead(job) {
			t.Fatal("not handed")
		}
		var f frames
		p, err := l.Start(context.Background(), job, f.decoder(), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			code int
			err  error
		}
		done := make(chan result, 1)
		go func() { code, err := p.Wait(); done <- result{code, err} }()
		select {
		case r := <-done:
			if r.err != nil || r.code != 0 || f.out.String() != "ran 1 gated 1\n" {
				t.Fatalf("round %d: exit %d, %v, printed %q", round, r.code, r.err, f.out.String())
			}
		case <-time.After(20 * time.Second):
			p.Stop(true)
			t.Fatalf("round %d: the job handed ahead was never released", round)
		}
	}
}

// TestHandAheadSidecarAtRelease: the sidecar (GPU telemetry) of a job
// handed ahead starts at its release, not while it waits at the gate
// through the attempt before: waiting 500 ms, it would have sent about 50
// ticks (one every 10 ms), held until the release and then passed on as
// if they were the next attempt's.
func TestHandAheadSidecarAtRelease(t *testing.T) {
	needPython(t)
	l := NewLocal(os.Args[0])
	l.agentEnv = append(os.Environ(), testAgentEnv+"=sidecar")
	t.Cleanup(func() { _ = l.Close() })
	job, marks := aheadJob(t)
	job.Sidecar = json.RawMessage(`{"interval":1}`)
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if !l.HandAhead(job) || !waitFor(filepath.Join(marks, "connected"), 10*time.Second) {
		t.Fatal("the job handed ahead never started")
	}
	time.Sleep(500 * time.Millisecond)
	var mu sync.Mutex
	var telemetry []string
	dec := wire.NewFrameDecoder(func(kind byte, p []byte) {
		if kind == wire.FrameTelemetry {
			mu.Lock()
			telemetry = append(telemetry, string(p))
			mu.Unlock()
		}
	})
	p, err := l.Start(context.Background(), job, dec, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	mu.Lock()
	defer mu.Unlock()
	ticks := 0
	for _, f := range telemetry {
		if f == "tick" {
			ticks++
		}
	}
	if len(telemetry) == 0 || !strings.HasPrefix(telemetry[0], "settings ") || ticks > 20 {
		t.Errorf("telemetry %q (%d ticks): want the sidecar started at the release, not at the hand-off", telemetry, ticks)
	}
}

// TestHandAheadMismatch: a Start whose job is not the one handed ahead
// stops that one before its gated part ran, waits for it, and starts its
// own job cold; one handed ahead goes with its standby at Cool.
func TestHandAheadMismatch(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	ctx := context.Background()
	job, marks := aheadJob(t)
	if err := l.Warm(ctx, job); err != nil {
		t.Fatal(err)
	}
	if !l.HandAhead(job) {
		t.Fatal("not handed")
	}
	if !waitFor(filepath.Join(marks, "connected"), 10*time.Second) {
		t.Fatal("the job handed ahead never started")
	}
	other := job
	otherMarks := t.TempDir()
	other.Env = map[string]string{"FOO": "3", "MARKS": otherMarks}
	var f frames
	if code := runWarm(t, l, other, &f); code != 0 || f.out.String() != "ran 3 gated None\n" {
		t.Errorf("the job started instead: exit %d, %q; want it run ungated", code, f.out.String())
	}
	if len(f.start) != 0 {
		t.Errorf("start frames %+v: the job was not started cold on an agent of its own", f.start)
	}
	if exists(filepath.Join(marks, "released")) {
		t.Error("the job handed ahead ran its gated part")
	}
	if left := jobProcs(marks); left != "" {
		t.Errorf("the job handed ahead is still there: %s", left)
	}

	// Cooled: the one handed ahead goes with its standby.
	os.Remove(filepath.Join(marks, "connected"))
	if err := l.Warm(ctx, job); err != nil {
		t.Fatal(err)
	}
	if !l.HandAhead(job) || !waitFor(filepath.Join(marks, "connected"), 10*time.Second) {
		t.Fatal("the second job handed ahead never started")
	}
	l.Cool()
	if left := jobProcs(marks); left != "" {
		t.Errorf("after Cool, the job handed ahead is still there: %s", left)
	}
	if exists(filepath.Join(marks, "released")) {
		t.Error("the job handed ahead ran its gated part")
	}
}

// jobProcs lists the processes whose environment has MARKS=dir (the jobs
// of one test).
func jobProcs(dir string) string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
		if err != nil || !bytes.Contains(env, []byte("MARKS="+dir+"\x00")) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		found = append(found, pid+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return strings.Join(found, "; ")
}

// TestHandAheadStoppedAtTheGate: a runner closed while its job handed
// ahead waits at the gate (the user's Ctrl-C during a restart's stop) stops
// it as it stops any job, with its grace: the gated part never runs, and
// nothing of it is left.
func TestHandAheadStoppedAtTheGate(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	job, marks := aheadJob(t)
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if !l.HandAhead(job) || !waitFor(filepath.Join(marks, "connected"), 10*time.Second) {
		t.Fatal("the job handed ahead never started")
	}
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a job waiting at its gate")
	}
	if exists(filepath.Join(marks, "released")) {
		t.Error("the job handed ahead ran its gated part")
	}
	if left := jobProcs(marks); left != "" {
		t.Errorf("after Close, the job handed ahead is still there: %s", left)
	}
}
