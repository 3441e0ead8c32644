package sshexec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/wire"
)

// warmScript is a Python job that says what it sees: its arguments, its
// working directory, a variable, and whether a module only the warm
// start imports was already there (what email.mime.text imports: the
// module named runs afresh).
const warmScript = `#!/usr/bin/python3
import os, sys
print("argv", sys.argv[1:], "cwd", os.path.basename(os.getcwd()), "FOO", os.environ.get("FOO"),
      "warm", "email.mime.nonmultipart" in sys.modules, "path0", sys.path[0] == os.path.dirname(os.path.realpath(__file__)),
      "main", __name__, flush=True)
sys.exit(int(os.environ.get("CODE", "0")))
`

func needPython(t *testing.T) {
	t.Helper()
	_, err := os.Stat("/usr/bin/python3")
	testenv.Need(t, err == nil, "/usr/bin/python3 is missing")
}

// warmJob is a job running warmScript from a folder of its own.
func warmJob(t *testing.T) (wire.Job, string) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "job.py")
	if err := os.WriteFile(script, []byte(warmScript), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	return wire.Job{Argv: []string{script, "a"}, Env: map[string]string{"FOO": "1"}, Dir: work,
		Preimport: []string{"email.mime.text"}}, script
}

// frames collects a relayed agent's frames.
type frames struct {
	mu    sync.Mutex
	out   bytes.Buffer
	start []wire.StartInfo
}

func (f *frames) decoder() *wire.FrameDecoder {
	return wire.NewFrameDecoder(func(kind byte, p []byte) {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch kind {
		case wire.FrameStdout, wire.FrameStderr:
			f.out.Write(p)
		case wire.FrameStart:
			var si wire.StartInfo
			json.Unmarshal(p, &si)
			f.start = append(f.start, si)
		}
	})
}

func runWarm(t *testing.T, l *Local, job wire.Job, f *frames) int {
	t.Helper()
	p, err := l.Start(context.Background(), job, f.decoder(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// TestWarmStart: a job handed to an agent on standby runs in the
// interpreter that was started first (its module already imported), yet
// with the job's own arguments, environment and working directory, as
// __main__, and exits with its own code.
func TestWarmStart(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	job, _ := warmJob(t)
	job.Relay = true
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the imports, while "the attempt runs"
	next := job
	next.Argv = []string{job.Argv[0], "b", "c"}
	next.Env = map[string]string{"FOO": "2", "CODE": "7"}
	var f frames
	if code := runWarm(t, l, next, &f); code != 7 {
		t.Errorf("exit %d, want the job's 7\n%s", code, f.out.String())
	}
	out := f.out.String()
	want := "argv ['b', 'c'] cwd work FOO 2 warm True path0 True main __main__"
	if !strings.Contains(out, want) {
		t.Errorf("the job saw %q, want %q", out, want)
	}
	if len(f.start) != 1 || !f.start[0].Warm || f.start[0].Time == 0 {
		t.Errorf("start frames: %+v, want one warm", f.start)
	}

	// Handed over at once, before the interpreter has even read the shim.
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	var h frames
	if code := runWarm(t, l, next, &h); code != 7 || !strings.Contains(h.out.String(), want) {
		t.Errorf("handed over at once: exit %d, saw %q", code, h.out.String())
	}

	// No agent on standby: the next job starts cold, as always.
	var g frames
	runWarm(t, l, next, &g)
	if !strings.Contains(g.out.String(), "warm False") || len(g.start) != 0 {
		t.Errorf("without Warm: %q, %+v", g.out.String(), g.start)
	}
}

// TestWarmStartWaitsForItsServer: a warm job with WaitFor runs only once
// that address accepts a connection, and soon after (the shim polls every
// few milliseconds, where torch's store client would retry after a
// second).
func TestWarmStartWaitsForItsServer(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	job, _ := warmJob(t)
	job.Argv = []string{"/usr/bin/python3", "-m", "gorun_started"}
	mod := filepath.Join(job.Dir, "gorun_started.py")
	if err := os.WriteFile(mod, []byte("import time\nprint('started %.6f' % time.time(), flush=True)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job.Relay = true
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // closed: the job must wait for it
	time.Sleep(300 * time.Millisecond)
	next := job
	next.WaitFor = addr
	var f frames
	done := make(chan int)
	go func() { done <- runWarm(t, l, next, &f) }()
	time.Sleep(500 * time.Millisecond)
	f.mu.Lock()
	early := f.out.String()
	f.mu.Unlock()
	if early != "" {
		t.Fatalf("the job ran before its server listened: %q", early)
	}
	// Taken before the listen: the job may connect before a clock read
	// after it (CI saw -0.98 ms), and cannot before the call.
	listening := time.Now()
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer ln.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, f.out.String())
	}
	var started float64
	if _, err := fmt.Sscanf(strings.TrimSpace(f.out.String()), "started %f", &started); err != nil {
		t.Fatalf("output %q: %v", f.out.String(), err)
	}
	after := time.Duration((started - float64(listening.UnixNano())/1e9) * 1e9)
	// Margin: 500 ms for a loaded 2-core machine, half torch's retry.
	if after < 0 || after > 500*time.Millisecond {
		t.Errorf("the job started %v after its server listened, want within 0-500ms", after)
	}
	if len(f.start) != 1 || !f.start[0].Warm {
		t.Errorf("start frames %+v, want one warm", f.start)
	}
}

// TestWarmStartFallsBack: a job whose import-time environment or program
// changed, or that is no Python script, starts cold, and the agent says
// why.
func TestWarmStartFallsBack(t *testing.T) {
	needPython(t)
	job, _ := warmJob(t)
	job.Relay = true
	shell := filepath.Join(t.TempDir(), "job.sh")
	os.WriteFile(shell, []byte("#!/bin/sh\necho shell job\n"), 0o755)
	for _, tc := range []struct {
		name   string
		warm   wire.Job
		change func(wire.Job) wire.Job
		why    string
	}{
		{"an import-time variable changed", job, func(j wire.Job) wire.Job {
			j.Env = map[string]string{"FOO": "1", "PYTHONHASHSEED": "7"}
			return j
		}, "PYTHONHASHSEED, read at import time, changed"},
		{"another working directory", job, func(j wire.Job) wire.Job { j.Dir = filepath.Dir(j.Dir); return j }, "the working directory changed"},
		{"a shell script", wire.Job{Argv: []string{shell}, Relay: true, Preimport: []string{"json"}}, func(j wire.Job) wire.Job { return j },
			"is run by /bin/sh, not by Python"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLocal(t)
			if err := l.Warm(context.Background(), tc.warm); err != nil {
				t.Fatal(err)
			}
			var f frames
			runWarm(t, l, tc.change(tc.warm), &f)
			if len(f.start) != 1 || f.start[0].Warm || !strings.Contains(f.start[0].Cold, tc.why) {
				t.Errorf("start frames %+v, want cold because %q", f.start, tc.why)
			}
			if strings.Contains(f.out.String(), "warm True") {
				t.Errorf("ran warm: %s", f.out.String())
			}
		})
	}
}

// TestWarmStandbyGoesWithTheRunner: an agent on standby that is never
// used, or is replaced, leaves nothing behind once the runner is closed.
func TestWarmStandbyGoesWithTheRunner(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	job, script := warmJob(t)
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if err := l.Warm(context.Background(), job); err != nil { // replaces the first
		t.Fatal(err)
	}
	count := func() int {
		out, _ := exec.Command("pgrep", "-f", script).Output()
		return len(strings.Fields(string(out)))
	}
	// Both have had time to start; the first is stopped as the second
	// comes.
	time.Sleep(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for count() != 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := count(); n != 1 {
		out, _ := exec.Command("pgrep", "-af", script).Output()
		t.Errorf("%d warm interpreters after a replacement, want 1:\n%s", n, out)
	}
	l.Close()
	deadline = time.Now().Add(5 * time.Second)
	for count() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := count(); n != 0 {
		t.Errorf("%d warm interpreters left after Close", n)
	}
}

// TestWarmCool: Cool ends the agent on standby and its interpreter (a
// node that left the job), and the next Start on the runner starts cold;
// a warm whose start Cool overtook is dropped too.
func TestWarmCool(t *testing.T) {
	needPython(t)
	l := newTestLocal(t)
	job, script := warmJob(t)
	count := func() int {
		out, _ := exec.Command("pgrep", "-f", script).Output()
		return len(strings.Fields(string(out)))
	}
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); count() != 1 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	l.Cool()
	if n := count(); n != 0 {
		t.Errorf("%d warm interpreters after Cool, want 0", n)
	}
	if p := l.warm.take(job, io.Discard, io.Discard); p != nil {
		t.Error("a standby was taken after Cool")
	}
	// A warm that Cool overtakes while it starts is not kept.
	var s warmSlot
	started := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.warm(context.Background(), job, func(ctx context.Context, j wire.Job, out, errw io.Writer) (Process, error) {
			close(started)
			<-release
			return l.Start(ctx, j, out, errw)
		})
	}()
	<-started
	s.coolDown()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	kept := s.a != nil
	s.mu.Unlock()
	if kept {
		t.Error("a warm that Cool overtook was kept")
	}
	// Its interpreter may show up a moment after the start returned, and
	// then go: none may be there for half a second on end, within 5 s.
	n, deadline, clear := 0, time.Now().Add(5*time.Second), time.Time{}
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n = count(); n != 0 {
			clear = time.Time{}
			continue
		}
		if clear.IsZero() {
			clear = time.Now()
		} else if time.Since(clear) >= 500*time.Millisecond {
			break
		}
	}
	if n != 0 {
		t.Errorf("%d warm interpreters left after the overtaken warm", n)
	}
}

// TestStopFreezesMain: a stop of a relayed job freezes the job's main
// process (torchrun): its own SIGTERM handler never runs, so it prints
// nothing, while its children get SIGTERM and their grace; it is killed
// once it is alone, and nothing is left.
func TestStopFreezesMain(t *testing.T) {
	l := newTestLocal(t)
	dir := t.TempDir()
	childTerm := filepath.Join(dir, "child-term")
	job := wire.Job{Argv: []string{"sh", "-c", `trap 'echo main got TERM' TERM
sh -c 'trap "echo child > ` + childTerm + `; exit 0" TERM; while :; do sleep 0.05; done' &
echo ready; wait; wait`}, Grace: 5 * time.Second, Relay: true}
	var out syncBuffer
	p, err := l.Start(context.Background(), job, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(string(out.Bytes()), "ready") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the child's trap is set
	start := time.Now()
	p.Stop(false)
	code, err := p.Wait()
	took := time.Since(start)
	if err != nil || code != 128+9 {
		t.Errorf("Wait = %d, %v; want the main process killed (137)", code, err)
	}
	if took > 2*time.Second {
		t.Errorf("took %v: the main process was not killed once alone", took)
	}
	if strings.Contains(string(out.Bytes()), "main got TERM") {
		t.Errorf("the main process ran its SIGTERM handler: %q", string(out.Bytes()))
	}
	if b, err := os.ReadFile(childTerm); err != nil || strings.TrimSpace(string(b)) != "child" {
		t.Errorf("the child did not get its SIGTERM: %q, %v", b, err)
	}
}

// TestAskThroughStandby: while an agent stands by, AgentOutput runs
// through it (its child, not a session or process of its own), with the
// command's stdout, exit and stderr's reason as a direct run gives them;
// the job handed to it later gets its output whole, and after the hand-off
// AgentOutput runs directly again. With a warm interpreter waiting, the
// agent's reaper (which reaps every child) runs too.
func TestAskThroughStandby(t *testing.T) {
	t.Run("no interpreter", func(t *testing.T) {
		askThroughStandby(t, wire.Job{Argv: []string{"sh", "-c", "echo the job ran"}, Relay: true, Preimport: []string{"json"}}, "the job ran\n")
	})
	t.Run("a warm interpreter", func(t *testing.T) {
		needPython(t)
		job, _ := warmJob(t)
		job.Relay = true
		askThroughStandby(t, job, "argv ['a'] cwd work FOO 1 warm True path0 True main __main__\n")
	})
}

func askThroughStandby(t *testing.T, job wire.Job, wantOut string) {
	l := newTestLocal(t)
	l.agentEnv = append(l.agentEnv, testAgentOutputEnv+"=1")
	ctx := context.Background()
	parent := func() string {
		t.Helper()
		out, err := l.AgentOutput(ctx, "_parent")
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if p := parent(); strings.Contains(p, wire.AgentCommand) {
		t.Fatalf("without a standby, asked through an agent: %q", p)
	}
	if err := l.Warm(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitAskReady(t, &l.warm)
	if p := parent(); !strings.Contains(p, wire.AgentCommand) {
		t.Errorf("with a standby, the command's parent is %q, want the agent", p)
	}
	out, err := l.AgentOutput(ctx, "_echo", "a", "b")
	if err != nil || string(out) != "a\nb\n" {
		t.Errorf("_echo through the standby: %q, %v", out, err)
	}
	out, err = l.AgentOutput(ctx, "_fail")
	if err == nil || !strings.Contains(err.Error(), "the real reason") || string(out) != "partial" {
		t.Errorf("_fail through the standby: %q, %v; want its stdout and its reason", out, err)
	}
	// Too much for a frame: asked again directly, and all of it comes.
	out, err = l.AgentOutput(ctx, "_big")
	if first, rest, _ := bytes.Cut(out, []byte("\n")); err != nil || len(rest) != 2<<20 || bytes.Contains(first, []byte(wire.AgentCommand)) {
		t.Errorf("_big: %d bytes after %q, %v; want 2 MiB, asked directly", len(rest), first, err)
	}
	var f frames
	if code := runWarm(t, l, job, &f); code != 0 || f.out.String() != wantOut {
		t.Errorf("the job handed over: exit %d, output %q", code, f.out.String())
	}
	if p := parent(); strings.Contains(p, wire.AgentCommand) {
		t.Errorf("after the hand-off, asked through an agent: %q", p)
	}
}

// waitAskReady waits until the slot's agent on standby says it reads asks.
func waitAskReady(t *testing.T, s *warmSlot) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		a := s.a
		s.mu.Unlock()
		if a != nil && a.ask != nil {
			a.ask.mu.Lock()
			ready := a.ask.ready
			a.ask.mu.Unlock()
			if ready {
				return
			}
		}
	}
	t.Fatal("the agent on standby never said it reads asks")
}

// TestAskAhead: a subcommand named in wire.Job.AskAhead is started by the agent
// on standby before it is asked, and serves the first ask with its
// argument on stdin; a second ask starts one afresh. One not asked ends
// when the job is handed over, so the job's agent ends with its job.
func TestAskAhead(t *testing.T) {
	l := newTestLocal(t)
	l.agentEnv = append(l.agentEnv, testAgentOutputEnv+"=1")
	ctx := context.Background()
	job := wire.Job{Argv: []string{"sh", "-c", "echo the job ran"}, Relay: true, Preimport: []string{"json"}, AskAhead: []string{"_ahead"}}
	if err := l.Warm(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitAskReady(t, &l.warm)
	for _, want := range []string{"ahead x y\n", "direct x y\n"} {
		if out, err := l.AgentOutput(ctx, "_ahead", "x y"); err != nil || string(out) != want {
			t.Errorf("_ahead through the standby: %q, %v; want %q", out, err, want)
		}
	}
	// Not asked: it ends once the job is handed over, while the job runs.
	pidFile := filepath.Join(t.TempDir(), "ahead-pid")
	l.agentEnv = append(l.agentEnv, "GORUN_TEST_AHEAD_PID="+pidFile)
	job.Argv = []string{"sh", "-c", "sleep 2; echo the job ran"}
	if err := l.Warm(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitAskReady(t, &l.warm)
	aheadPIDs := func() (pid, agent int) {
		for deadline := time.Now().Add(5 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			b, _ := os.ReadFile(pidFile)
			fmt.Sscan(string(b), &pid, &agent)
		}
		return pid, agent
	}
	pid, _ := aheadPIDs()
	if pid == 0 {
		t.Fatal("the ask was not started ahead")
	}
	done := make(chan int, 1)
	var f frames
	go func() { done <- runWarm(t, l, job, &f) }()
	gone := false
	for deadline := time.Now().Add(time.Second); !gone && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		gone = syscall.Kill(pid, 0) != nil
	}
	if !gone {
		t.Errorf("the ask started ahead (PID %d) still runs 1 s after the hand-off", pid)
	}
	if code := <-done; code != 0 || f.out.String() != "the job ran\n" {
		t.Errorf("the job handed over: exit %d, output %q", code, f.out.String())
	}
	// A warm interpreter's standby stopped (its node leaves the job): its
	// agent ends, and the ask started ahead with it (the agent waits for
	// every child to go).
	needPython(t)
	os.Remove(pidFile)
	job, _ = warmJob(t)
	job.Relay, job.AskAhead = true, []string{"_ahead"}
	if err := l.Warm(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitAskReady(t, &l.warm)
	pid, agent := aheadPIDs()
	start := time.Now()
	l.Cool()
	for _, p := range []int{pid, agent} {
		for p > 0 && syscall.Kill(p, 0) == nil && time.Since(start) < 3*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		if p <= 0 || syscall.Kill(p, 0) == nil {
			t.Errorf("PID %d (the ask started ahead %d, the standby's agent %d) still runs 3 s after Cool", p, pid, agent)
		}
	}
}
