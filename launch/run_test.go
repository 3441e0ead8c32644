package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/pystack"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/sshexec"
)

// script says how a fake node behaves in one attempt.
type script struct {
	out       string          // written to stdout once started
	errOut    string          // written to stderr once started
	after     time.Duration   // exit by itself after this long; 0 runs until stopped
	code      int             // exit code when exiting by itself
	lost      error           // Wait reports the node lost instead of a code
	startErr  error           // Start fails
	stubborn  bool            // only Stop(true) ends it
	stopCode  int             // exit code after a stop (torchrun exits 1 on SIGTERM)
	startWait time.Duration   // Start takes this long (cut short by its ctx)
	frames    []timedFrame    // relayed worker frames, written in order, each after its delay
	onTell    map[byte][]byte // frames written when a Tell of that byte arrives
	linger    time.Duration   // a stop ends the process only after this long (frames still flow)
}

// timedFrame is a relayed frame a fake node writes after a delay from the
// previous one.
type timedFrame struct {
	after time.Duration
	frame []byte
}

// fakeRunner is a Runner whose one process follows a script.
type fakeRunner struct {
	name string
	sc   script

	mu   sync.Mutex
	proc *fakeProc
}

var _ sshexec.Runner = (*fakeRunner)(nil)

func (r *fakeRunner) Node() string { return r.name }
func (r *fakeRunner) Output(context.Context, []string) ([]byte, error) {
	return nil, errors.New("fake: no Output")
}
func (r *fakeRunner) Close() error { return nil }
func (r *fakeRunner) Addr() string { return "" }
func (r *fakeRunner) AgentOutput(context.Context, ...string) ([]byte, error) {
	return nil, errors.New("fakeRunner has no agent")
}

func (r *fakeRunner) Start(ctx context.Context, job wire.Job, stdout, stderr io.Writer) (sshexec.Process, error) {
	if r.sc.startWait > 0 {
		select {
		case <-time.After(r.sc.startWait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if r.sc.startErr != nil {
		return nil, r.sc.startErr
	}
	p := &fakeProc{sc: r.sc, stop: make(chan bool, 2), done: make(chan struct{}), tells: make(chan byte, 8)}
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	go p.run(stdout, stderr)
	return p, nil
}

type fakeProc struct {
	sc    script
	stop  chan bool
	done  chan struct{}
	tells chan byte

	mu      sync.Mutex
	stops   []bool // the now argument of every Stop
	signals []syscall.Signal
	stopped time.Time
	ended   time.Time
	code    int
	err     error
}

func (p *fakeProc) run(stdout, stderr io.Writer) {
	// A relayed agent frames the job's output on its stdout.
	stdout.Write(wire.AppendFrame(nil, wire.FrameStdout, []byte(p.sc.out)))
	stdout.Write(wire.AppendFrame(nil, wire.FrameStderr, []byte(p.sc.errOut)))
	quit, workerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(workerDone)
		frames := p.sc.frames
		for {
			var next <-chan time.Time
			if len(frames) > 0 {
				next = time.After(frames[0].after)
			}
			select {
			case <-quit:
				return
			case <-next:
				stdout.Write(frames[0].frame)
				frames = frames[1:]
			case b := <-p.tells:
				stdout.Write(p.sc.onTell[b])
			}
		}
	}()
	var timeout <-chan time.Time
	if p.sc.after > 0 {
		t := time.NewTimer(p.sc.after)
		defer t.Stop()
		timeout = t.C
	}
	code, err := p.sc.code, p.sc.lost
	for wait := true; wait; {
		select {
		case <-timeout:
			wait = false
		case now := <-p.stop:
			if now || !p.sc.stubborn {
				time.Sleep(p.sc.linger)
				code, err, wait = p.sc.stopCode, nil, false
			}
		}
	}
	close(quit)
	<-workerDone
	p.mu.Lock()
	p.code, p.err, p.ended = code, err, time.Now()
	if err != nil {
		p.code = -1
	}
	p.mu.Unlock()
	close(p.done)
}

func (p *fakeProc) Wait() (int, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code, p.err
}

func (p *fakeProc) Tell(msg ...byte) {
	for _, b := range msg {
		select {
		case p.tells <- b:
		default:
		}
	}
}

func (p *fakeProc) Interrupt(syscall.Signal, time.Duration) { p.Stop(false) }

func (p *fakeProc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	p.signals = append(p.signals, sig)
	p.mu.Unlock()
}

func (p *fakeProc) Stop(now bool) {
	p.mu.Lock()
	p.stops = append(p.stops, now)
	if p.stopped.IsZero() {
		p.stopped = time.Now()
	}
	p.mu.Unlock()
	select {
	case p.stop <- now:
	default: // a stop is already pending
	}
}

func (p *fakeProc) stopCalls() []bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.stops...)
}

// cluster runs scripts as nodes node1..nodeN, one row of scripts per attempt
// (the last row repeats), and records what Attempt was asked for.
type cluster struct {
	plan [][]script

	mu       sync.Mutex
	attempts []int
	runners  [][]*fakeRunner
}

func (c *cluster) attempt(_ context.Context, k int, _ *Restart) ([]Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts = append(c.attempts, k)
	row := c.plan[min(k, len(c.plan)-1)]
	var nodes []Node
	var rs []*fakeRunner
	for i, sc := range row {
		r := &fakeRunner{name: fmt.Sprintf("node%d", i+1), sc: sc}
		rs = append(rs, r)
		nodes = append(nodes, Node{Name: r.name, Runner: r,
			Job: wire.Job{Argv: []string{"torchrun"}, Env: map[string]string{"GORUN_RESTART_COUNT": fmt.Sprint(k)}}})
	}
	c.runners = append(c.runners, rs)
	return nodes, nil
}

// proc returns the process of node i (0-based) in attempt k, nil if it never
// started.
func (c *cluster) proc(k, i int) *fakeProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k >= len(c.runners) {
		return nil
	}
	r := c.runners[k][i]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// syncBuffer is a bytes.Buffer safe to read while Run writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond until it holds; the test's deadline bounds it.
func waitFor(cond func() bool) {
	for !cond() {
		time.Sleep(ms)
	}
}

// checkNoLeak fails when goroutines started during the test outlive it.
func checkNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left behind (had %d):\n%s", runtime.NumGoroutine()-before, before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func rootCauseText(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join("testdata", "torchrun_failure.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const ms = time.Millisecond

func TestRunAllSucceed(t *testing.T) {
	before := runtime.NumGoroutine()
	ok := func(i int) script {
		return script{out: fmt.Sprintf("[default0]:hello from %d\n[default1]:bye", i), errOut: "torchrun says hi\n", after: time.Duration(i+1) * 10 * ms}
	}
	c := &cluster{plan: [][]script{{ok(0), ok(1), ok(2)}}}
	var out, diag syncBuffer
	res, err := Run(context.Background(), Options{Attempt: c.attempt, MaxRestarts: 2, Out: &out, Diag: &diag})
	if err != nil || res.Attempts != 1 || res.Failure != nil {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	for i := range 3 {
		for _, want := range []string{fmt.Sprintf("[node%d 0] hello from %d\n", i+1, i), fmt.Sprintf("[node%d 1] bye\n", i+1), fmt.Sprintf("[node%d] torchrun says hi\n", i+1)} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		if s := c.proc(0, i).stopCalls(); len(s) != 0 {
			t.Errorf("node%d stopped %v though all succeeded", i+1, s)
		}
	}
	if diag.String() != "" {
		t.Errorf("diag = %q, want nothing", diag.String())
	}
	checkNoLeak(t, before)
}

func TestRunEarlySuccessLeavesOthersRunning(t *testing.T) {
	before := runtime.NumGoroutine()
	c := &cluster{plan: [][]script{{{after: 5 * ms}, {after: 60 * ms}}}}
	res, err := Run(context.Background(), Options{Attempt: c.attempt})
	if err != nil || res.Attempts != 1 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if s := c.proc(0, 1).stopCalls(); len(s) != 0 {
		t.Errorf("node2 was stopped (%v) after node1 succeeded", s)
	}
	checkNoLeak(t, before)
}

func TestRunFailureRestartsGroup(t *testing.T) {
	before := runtime.NumGoroutine()
	failing := script{errOut: rootCauseText(t), after: 20 * ms, code: 1}
	running := script{out: "[default0]:training\n", stopCode: 1}
	done := script{after: 10 * ms}
	c := &cluster{plan: [][]script{
		{running, failing, running},
		{done, done, done},
	}}
	var diag syncBuffer
	var stopping []int
	var stoppingAt time.Time
	res, err := Run(context.Background(), Options{Attempt: c.attempt, MaxRestarts: 2, Backoff: 10 * ms, Diag: &diag,
		Stopping: func(_ context.Context, k int) { stopping, stoppingAt = append(stopping, k), time.Now() }})
	if err != nil || res.Attempts != 2 || res.Failure != nil {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if fmt.Sprint(stopping) != "[0]" || stoppingAt.After(c.proc(0, 0).stopped) {
		t.Errorf("Stopping called for %v at %v, want once for attempt 0, before its nodes were stopped (%v)",
			stopping, stoppingAt, c.proc(0, 0).stopped)
	}
	if fmt.Sprint(c.attempts) != "[0 1]" {
		t.Errorf("Attempt called with %v, want [0 1]", c.attempts)
	}
	failed := c.proc(0, 1)
	for _, i := range []int{0, 2} {
		p := c.proc(0, i)
		if s := p.stopCalls(); len(s) == 0 || s[0] {
			t.Errorf("node%d stops = %v, want a graceful stop first", i+1, s)
		}
		if lag := p.stopped.Sub(failed.ended); lag > time.Second {
			t.Errorf("node%d stopped %v after node2 failed", i+1, lag)
		}
	}
	if s := failed.stopCalls(); len(s) != 0 {
		t.Errorf("the failed node was stopped: %v", s)
	}
	want := "gorun: node2 failed (exit 1: worker rank 3 (local rank 1) exited with 7); restarting the whole group (attempt 2 of 3)\n"
	if first, _, _ := strings.Cut(diag.String(), "\n"); first+"\n" != want || !strings.Contains(diag.String(), "gorun: restart after attempt 1: failure seen") {
		t.Errorf("diag = %q\nwant %q", diag.String(), want)
	}
	checkNoLeak(t, before)
}

func TestRunRestartsExhausted(t *testing.T) {
	before := runtime.NumGoroutine()
	failing := script{out: "[default1]:about to fail\n", errOut: rootCauseText(t), after: 10 * ms, code: 1}
	c := &cluster{plan: [][]script{{{stopCode: 1}, failing}}}
	var diag syncBuffer
	var stopping []int
	res, err := Run(context.Background(), Options{Attempt: c.attempt, MaxRestarts: 1, Diag: &diag,
		Stopping: func(_ context.Context, k int) { stopping = append(stopping, k) }})
	if fmt.Sprint(stopping) != "[0]" {
		t.Errorf("Stopping called for %v, want attempt 0 only (no restart after attempt 1)", stopping)
	}
	var jf *JobFailed
	if !errors.As(err, &jf) {
		t.Fatalf("err = %v, want *JobFailed", err)
	}
	f := jf.Failure
	if f.Node != "node2" || f.Rank != 3 || f.LocalRank != 1 || f.Code != 7 || jf.ExitCode() != 7 {
		t.Errorf("failure = %+v", f)
	}
	if res.Attempts != 2 || res.Failure == nil || res.Failure.Code != 7 {
		t.Errorf("result = %+v", res)
	}
	if len(f.LastLines) != tailLines || f.LastLines[len(f.LastLines)-1] != "[node2] ============================================================" {
		t.Errorf("last lines = %q", f.LastLines)
	}
	if got := strings.Count(diag.String(), "restarting the whole group"); got != 1 {
		t.Errorf("%d restart messages, want 1:\n%s", got, diag.String())
	}
	if !strings.Contains(diag.String(), "gorun: job failed after 2 attempts\n") {
		t.Errorf("no summary:\n%s", diag.String())
	}
	checkNoLeak(t, before)
}

func TestRunFailureCodes(t *testing.T) {
	multi, err := os.ReadFile(filepath.Join("testdata", "torchrun_failure_multi.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		sc          script
		code        int
		rank, local int
		reason      string
	}{
		{"no summary: torchrun's code", script{errOut: "rendezvous timed out\n", after: ms, code: 1}, 1, -1, -1, "exit 1"},
		{"worker killed by signal", script{errOut: string(multi), after: ms, code: 1}, 137, 10, 2,
			"exit 1: worker rank 10 (local rank 2) was killed by signal 9 (SIGKILL)"},
		{"summary in worker output is not torchrun's", script{out: "[default0]:Root Cause (first observed failure):\n[default0]:[0]:\n[default0]:  rank      : 3 (local_rank: 1)\n[default0]:  exitcode  : 7 (pid: 1)\n", after: ms, code: 2}, 2, -1, -1, "exit 2"},
		{"summary without final newline", script{errOut: strings.TrimSuffix(strings.Split(rootCauseText(t), "  error_file")[0], "\n"), after: ms, code: 1}, 7, 3, 1,
			"exit 1: worker rank 3 (local rank 1) exited with 7"},
		{"node lost", script{after: ms, lost: errors.New("heartbeat missed")}, -1, -1, -1, "node lost: heartbeat missed"},
		{"start fails", script{startErr: errors.New("agent: no such file")}, -1, -1, -1, "start: agent: no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			c := &cluster{plan: [][]script{{tt.sc}}}
			_, err := Run(context.Background(), Options{Attempt: c.attempt})
			var jf *JobFailed
			if !errors.As(err, &jf) {
				t.Fatalf("err = %v, want *JobFailed", err)
			}
			f := jf.Failure
			if f.Code != tt.code || f.Rank != tt.rank || f.LocalRank != tt.local || f.Reason != tt.reason || f.Node != "node1" {
				t.Errorf("failure = %+v\nwant code %d rank %d local %d reason %q", f, tt.code, tt.rank, tt.local, tt.reason)
			}
			wantExit := tt.code
			if wantExit < 1 || wantExit > 255 {
				wantExit = 1
			}
			if jf.ExitCode() != wantExit {
				t.Errorf("ExitCode = %d, want %d", jf.ExitCode(), wantExit)
			}
			checkNoLeak(t, before)
		})
	}
}

func TestRunStartErrorStopsOthers(t *testing.T) {
	before := runtime.NumGoroutine()
	c := &cluster{plan: [][]script{{{stopCode: 1}, {startErr: errors.New("ssh: handshake failed"), startWait: 20 * ms}, {stopCode: 1}}}}
	_, err := Run(context.Background(), Options{Attempt: c.attempt})
	var jf *JobFailed
	if !errors.As(err, &jf) || jf.Failure.Node != "node2" || !strings.Contains(err.Error(), "node2") || !strings.Contains(err.Error(), "handshake failed") {
		t.Fatalf("err = %v", err)
	}
	for _, i := range []int{0, 2} {
		if s := c.proc(0, i).stopCalls(); len(s) != 1 || s[0] {
			t.Errorf("node%d stops = %v, want one graceful stop", i+1, s)
		}
	}
	if c.proc(0, 1) != nil {
		t.Errorf("node2 has a process though its start failed")
	}
	checkNoLeak(t, before)
}

func TestRunInterrupted(t *testing.T) {
	before := runtime.NumGoroutine()
	c := &cluster{plan: [][]script{{{stopCode: 1}, {stopCode: 1}, {after: 5 * ms}}}}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*ms, cancel)
	res, err := Run(ctx, Options{Attempt: c.attempt, MaxRestarts: 5,
		Stopping: func(context.Context, int) { t.Error("Stopping called for a stop from outside") }})
	if res.Attempts != 1 || len(c.attempts) != 1 {
		t.Errorf("result = %+v, attempts %v: an interruption must not restart", res, c.attempts)
	}
	for _, i := range []int{0, 1} {
		if s := c.proc(0, i).stopCalls(); len(s) != 1 || s[0] {
			t.Errorf("node%d stops = %v, want one graceful stop", i+1, s)
		}
	}
	// node3 has usually exited 0 by the time of the cancel; on a loaded
	// machine it may still be counted as running, and then it is stopped too.
	stopped := 2 + len(c.proc(0, 2).stopCalls())
	if want := fmt.Sprintf("stopped %d of 3 nodes", stopped); !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrInterrupted having %s", err, want)
	}
	checkNoLeak(t, before)
}

func TestRunKill(t *testing.T) {
	before := runtime.NumGoroutine()
	c := &cluster{plan: [][]script{{{stubborn: true, stopCode: 137}, {stubborn: true, stopCode: 137}}}}
	ctx, cancel := context.WithCancel(context.Background())
	kill := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		// First Ctrl-C once both run; second once both were asked to stop.
		waitFor(func() bool { return c.proc(0, 0) != nil && c.proc(0, 1) != nil })
		cancel()
		waitFor(func() bool { return len(c.proc(0, 0).stopCalls()) > 0 && len(c.proc(0, 1).stopCalls()) > 0 })
		close(killed)
		close(kill)
	}()
	_, err := Run(ctx, Options{Attempt: c.attempt, Kill: kill})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	select {
	case <-killed:
	default:
		t.Errorf("Run returned before the kill")
	}
	for i := range 2 {
		if s := c.proc(0, i).stopCalls(); fmt.Sprint(s) != "[false true]" {
			t.Errorf("node%d stops = %v, want [false true]", i+1, s)
		}
	}
	checkNoLeak(t, before)
}

func TestRunInterruptedDuringStart(t *testing.T) {
	before := runtime.NumGoroutine()
	c := &cluster{plan: [][]script{{{stopCode: 1}, {startWait: time.Hour}}}}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*ms, cancel)
	_, err := Run(ctx, Options{Attempt: c.attempt, MaxRestarts: 3})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	if s := c.proc(0, 0).stopCalls(); len(s) != 1 {
		t.Errorf("node1 stops = %v, want one", s)
	}
	checkNoLeak(t, before)
}

func TestRunInterruptedDuringBackoff(t *testing.T) {
	before := runtime.NumGoroutine()
	c := &cluster{plan: [][]script{{{after: ms, code: 1}}, {{after: ms, code: 1}}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	// The first restart is at once; the second one's message is written
	// just before its pause.
	diag := writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "(attempt 3 of 4) in 1h0m0s") {
			cancel()
		}
		return len(p), nil
	})
	res, err := Run(ctx, Options{Attempt: c.attempt, MaxRestarts: 3, Backoff: time.Hour, Diag: diag})
	if !errors.Is(err, ErrInterrupted) || time.Since(start) > 5*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
	if res.Failure == nil || res.Failure.Code != 1 {
		t.Errorf("result = %+v, want the failure that led to the pause", res)
	}
	checkNoLeak(t, before)
}

func TestRunAttemptError(t *testing.T) {
	boom := errors.New("no free port")
	_, err := Run(context.Background(), Options{Attempt: func(context.Context, int, *Restart) ([]Node, error) { return nil, boom }})
	if !errors.Is(err, boom) || errors.Is(err, ErrInterrupted) {
		t.Errorf("err = %v", err)
	}
	_, err = Run(context.Background(), Options{Attempt: func(context.Context, int, *Restart) ([]Node, error) { return nil, nil }})
	if err == nil {
		t.Errorf("no nodes: err = nil")
	}
	if _, err := Run(context.Background(), Options{}); err == nil {
		t.Errorf("nil Attempt: err = nil")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestRunPrefersTheCrashOverItsConsequence: node1's worker dies of the broken
// connection (exit 1) a moment before node2 reports the worker that crashed
// with its own code; the failure names node2's worker.
func TestRunPrefersTheCrashOverItsConsequence(t *testing.T) {
	before := runtime.NumGoroutine()
	consequence := script{after: 10 * ms, code: 1}
	another := script{after: 50 * ms, code: 1}
	crash := script{errOut: rootCauseText(t), after: 150 * ms, code: 1}
	c := &cluster{plan: [][]script{{consequence, crash, another, {stopCode: 143}}}}
	_, err := Run(context.Background(), Options{Attempt: c.attempt})
	var jf *JobFailed
	if !errors.As(err, &jf) {
		t.Fatalf("err = %v, want *JobFailed", err)
	}
	if f := jf.Failure; f.Node != "node2" || f.Code != 7 {
		t.Errorf("failure = %+v, want node2's worker code 7", f)
	}
	checkNoLeak(t, before)
}

// Relayed worker frames, as a worker's supervisor sends them.
func started(lr, rank int) []byte {
	return wire.AppendFrame(nil, wire.FrameStarted, wire.JSON(wire.WorkerStarted{Rank: rank, LocalRank: lr, WorldSize: 4, PID: 100 + rank}))
}

func exited(lr, rank, code, sig int, stopped bool, at time.Time) []byte {
	return wire.AppendFrame(nil, wire.FrameExit, wire.JSON(wire.WorkerExit{Rank: rank, LocalRank: lr, Code: code, Signal: sig, Stopped: stopped, Time: at.UnixNano()}))
}

func line(kind byte, lr int, text string) []byte {
	return wire.AppendFrame(nil, kind, append(wire.AppendRank(nil, lr), text...))
}

// released is the agent's word that the job handed ahead was released.
func released() []byte {
	return wire.AppendFrame(nil, wire.FrameStart, wire.JSON(wire.StartInfo{Released: true}))
}

func joined(lr int) []byte { return wire.AppendFrame(nil, wire.FrameInit, wire.AppendRank(nil, lr)) }

// TestRunWorkerExitStopsGroup: a worker exits with 3 while its torchrun
// keeps running (as torchrun 1.x sits in its exit barrier): the head stops
// every node at once and names the worker, its code and phase.
func TestRunWorkerExitStopsGroup(t *testing.T) {
	before := runtime.NumGoroutine()
	crash := script{stopCode: 1, frames: []timedFrame{
		{0, started(0, 0)}, {0, line(wire.FrameErr, 0, "missing data file\n")}, {20 * ms, exited(0, 0, 3, 0, false, time.Now())}}}
	peer := script{stopCode: 143, frames: []timedFrame{{0, started(0, 1)}, {0, joined(0)}}}
	c := &cluster{plan: [][]script{{crash, peer}}}
	var diag syncBuffer
	t0 := time.Now()
	_, err := Run(context.Background(), Options{Attempt: c.attempt, Diag: &diag})
	var jf *JobFailed
	if !errors.As(err, &jf) {
		t.Fatalf("err = %v, want *JobFailed", err)
	}
	f := jf.Failure
	if f.Node != "node1" || f.Rank != 0 || f.LocalRank != 0 || f.Code != 3 || f.Phase != "start-up (had not reached the rendezvous store)" {
		t.Errorf("failure = %+v", f)
	}
	if len(f.LastLines) != 1 || !strings.Contains(f.LastLines[0], "missing data file") {
		t.Errorf("last lines = %q, want the worker's own", f.LastLines)
	}
	if took := time.Since(t0); took > time.Second {
		t.Errorf("took %v to stop the group", took)
	}
	for i := range 2 {
		if s := c.proc(0, i).stopCalls(); len(s) == 0 {
			t.Errorf("node%d was not stopped", i+1)
		}
	}
	if !strings.Contains(diag.String(), "gorun: node1 rank 0 (local rank 0) exited with 3 during start-up") {
		t.Errorf("diag = %q", diag.String())
	}
	checkNoLeak(t, before)
}

// TestRunEarliestWorkerFailureIsTheCause: node1's worker reports first, but
// node2's worker failed earlier by its own clock; a worker that was
// stopped is never the cause.
func TestRunEarliestWorkerFailureIsTheCause(t *testing.T) {
	t0 := time.Now()
	first := script{stopCode: 1, frames: []timedFrame{{0, started(0, 0)}, {0, joined(0)}, {10 * ms, exited(0, 0, 1, 0, false, t0.Add(50*ms))}}}
	cause := script{stopCode: 1, linger: 100 * ms, frames: []timedFrame{{0, started(0, 1)}, {0, joined(0)}, {60 * ms, exited(0, 1, 9, 0, false, t0)}}}
	stopped := script{stopCode: 143, frames: []timedFrame{{0, started(0, 2)}, {30 * ms, exited(0, 2, -1, 15, true, t0.Add(-time.Second))}}}
	c := &cluster{plan: [][]script{{first, cause, stopped}}}
	_, err := Run(context.Background(), Options{Attempt: c.attempt})
	var jf *JobFailed
	if !errors.As(err, &jf) {
		t.Fatalf("err = %v", err)
	}
	if f := jf.Failure; f.Node != "node2" || f.Code != 9 || f.Phase != "training" {
		t.Errorf("failure = %+v, want node2's exit 9 in training", f)
	}
}

// TestRunWorkerSignalCode: a worker killed by SIGKILL gives 137.
func TestRunWorkerSignalCode(t *testing.T) {
	kill := script{stopCode: 1, frames: []timedFrame{{0, started(1, 5)}, {0, joined(1)}, {5 * ms, exited(1, 5, -1, 9, false, time.Now())}}}
	c := &cluster{plan: [][]script{{kill}}}
	_, err := Run(context.Background(), Options{Attempt: c.attempt})
	var jf *JobFailed
	if !errors.As(err, &jf) || jf.ExitCode() != 137 || jf.Failure.Signal != 9 {
		t.Fatalf("err = %v, want exit 137 by SIGKILL", err)
	}
	if s := renderSummary(jf.Failure, 1); !strings.Contains(s, "code:   137 (killed by SIGKILL)") || !strings.Contains(s, "phase:  training") {
		t.Errorf("summary:\n%s", s)
	}
}

// TestRunHang: no worker makes progress for the timeout: the silent ranks
// are named, every node is asked for stacks, the culprit lines say where
// each rank is (the stuck rank first, with its stack; not the raw dumps),
// every rank's stacks are handed to SaveStacks, and the attempt fails
// with ExitHang, naming the stuck rank.
func TestRunHang(t *testing.T) {
	before := runtime.NumGoroutine()
	stacks := func(lr int, d pystack.Dump) []byte {
		return wire.AppendFrame(nil, wire.FrameStacks, append(wire.AppendRank(nil, lr), wire.JSON(d)...))
	}
	at := func(file string, line int, fn, src string) pystack.Dump {
		return pystack.Dump{Tool: pystack.ToolFaulthandler, Text: "Fatal Python error: Aborted\n",
			Threads: []pystack.Thread{{ID: "0x1", Current: true, Frames: []pystack.Frame{{File: file, Line: line, Func: fn, Source: src}}}}}
	}
	reduce := at("/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 1541, "all_reduce", "work.wait()")
	reduce.Threads[0].Frames = append(reduce.Threads[0].Frames, pystack.Frame{File: "/w/train.py", Line: 9, Func: "<module>", Source: "dist.all_reduce(t)"})
	var dump []byte
	dump = append(dump, stacks(0, reduce)...)
	dump = append(dump, exited(0, 0, -1, 6, true, time.Now())...)
	dump = append(dump, stacks(1, at("/w/train.py", 8, "<module>", "time.sleep(3600)"))...)
	dump = append(dump, exited(1, 1, -1, 6, true, time.Now())...)
	quiet := script{stopCode: 143, frames: []timedFrame{{0, started(0, 0)}, {0, started(1, 1)}, {0, line(wire.FrameOut, 0, "step 1\n")}},
		onTell: map[byte][]byte{wire.TellDump: dump}}
	c := &cluster{plan: [][]script{{quiet}}}
	var out, diag syncBuffer
	var saved []RankStacks
	var savedLines []string
	save := func(k int, rs []RankStacks, lines []string) (string, error) {
		saved, savedLines = rs, lines
		return "/runs/x/attempt-0/stacks", nil
	}
	_, err := Run(context.Background(), Options{Attempt: c.attempt, HangTimeout: 150 * ms, Out: &out, Diag: &diag, SaveStacks: save})
	var jf *JobFailed
	if !errors.As(err, &jf) || jf.ExitCode() != ExitHang || jf.Failure.Phase != "hang" {
		t.Fatalf("err = %v, want a hang", err)
	}
	if f := jf.Failure; f.Rank != 1 || f.LocalRank != 1 || !strings.Contains(f.Reason, "stuck: node1 rank 1 at train.py:8 time.sleep(3600)") {
		t.Errorf("failure = %+v, want rank 1, stuck", f)
	}
	d := diag.String()
	for _, want := range []string{
		"gorun:   silent: node1 rank 0 (local rank 0)",
		"gorun: hang: stuck: node1 rank 1 at train.py:8 time.sleep(3600) — not in a collective\n" +
			"gorun: hang: waiting: node1 rank 0 in all_reduce at train.py:9 dist.all_reduce(t)\n" +
			"gorun: hang: node1 rank 1, thread 0x1, by faulthandler (most recent call first):\n" +
			"gorun:     File \"/w/train.py\", line 8 in <module>\n" +
			"gorun:       time.sleep(3600)\n" +
			"gorun: hang: every rank's stacks, all threads: /runs/x/attempt-0/stacks (one file per rank, and summary.txt)\n",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("diag lacks %q:\n%s", want, d)
		}
	}
	if !strings.Contains(out.String(), "[node1 0 r0] step 1\n") || strings.Contains(out.String(), "Fatal Python error") {
		t.Errorf("out = %q, want the output, not the dumps", out.String())
	}
	if len(saved) != 2 || saved[0].Rank != 0 || saved[1].Rank != 1 || saved[1].Dump == nil || len(savedLines) != 2 {
		t.Errorf("saved %+v, lines %q", saved, savedLines)
	}
	checkNoLeak(t, before)
}

// TestRunHeartbeatKeepsAlive: progress frames (a touched heartbeat file)
// keep a quiet job from counting as hung.
func TestRunHeartbeatKeepsAlive(t *testing.T) {
	beat := wire.AppendFrame(nil, wire.FrameProgress, wire.AppendRank(nil, 0))
	frames := []timedFrame{{0, started(0, 0)}}
	for range 10 {
		frames = append(frames, timedFrame{50 * ms, beat})
	}
	frames = append(frames, timedFrame{0, exited(0, 0, 0, 0, false, time.Now())})
	// 600 ms in all, far past the timeout; beats 50 ms apart, far inside it.
	c := &cluster{plan: [][]script{{{after: 600 * ms, frames: frames}}}}
	if _, err := Run(context.Background(), Options{Attempt: c.attempt, HangTimeout: 400 * ms}); err != nil {
		t.Fatalf("err = %v, want success", err)
	}
}

// TestRunDropsTeeCopies: torchrun's --tee copy of a line a worker sent
// itself is not printed twice.
func TestRunDropsTeeCopies(t *testing.T) {
	sc := script{after: 50 * ms, frames: []timedFrame{{0, started(0, 0)}, {0, line(wire.FrameOut, 0, "hello\n")},
		{0, wire.AppendFrame(nil, wire.FrameStdout, []byte("[default0]:hello\ntorchrun says\n"))},
		{0, exited(0, 0, 0, 0, false, time.Now())}}}
	c := &cluster{plan: [][]script{{sc}}}
	var out syncBuffer
	if _, err := Run(context.Background(), Options{Attempt: c.attempt, Out: &out}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "[node1 0 r0] hello\n[node1] torchrun says\n" {
		t.Errorf("out = %q", got)
	}
}

// TestRunHangAsksRASFirst: with an NCCL job's RAS reporter running, the
// head asks for NCCL's report before the stacks (which end the workers).
func TestRunHangAsksRASFirst(t *testing.T) {
	reporter := wire.AppendFrame(nil, wire.FrameStarted, wire.JSON(wire.WorkerStarted{Rank: 0, LocalRank: 0, WorldSize: 2, RASReporter: true}))
	ras := append(line(wire.FrameErr, 0, "nccl ras: ranks behind the others (did not join a collective, or no answer): 1\n"),
		wire.AppendFrame(nil, wire.FrameRASDone, append(wire.AppendRank(nil, 0), "[1]"...))...)
	dump := append(line(wire.FrameErr, 0, "Fatal Python error: Aborted\n"), exited(0, 0, -1, 6, true, time.Now())...)
	sc := script{stopCode: 143, frames: []timedFrame{{0, reporter}}, onTell: map[byte][]byte{wire.TellRAS: ras, wire.TellDump: dump}}
	c := &cluster{plan: [][]script{{sc}}}
	var out syncBuffer
	_, err := Run(context.Background(), Options{Attempt: c.attempt, HangTimeout: 100 * ms, Out: &out, Err: &out, Diag: &out})
	var jf *JobFailed
	if !errors.As(err, &jf) || jf.ExitCode() != ExitHang {
		t.Fatalf("err = %v, want a hang", err)
	}
	got := out.String()
	r, d := strings.Index(got, "nccl ras: ranks behind"), strings.Index(got, "Fatal Python error")
	if r < 0 || d < 0 || r > d {
		t.Errorf("want NCCL's report, then the stacks:\n%s", got)
	}
	if !strings.Contains(got, "gorun: hang: NCCL's RAS: rank 1 is behind the others") || !strings.Contains(jf.Failure.Reason, "NCCL's RAS: rank 1 is behind the others") {
		t.Errorf("the lagging rank is not in the culprit lines and the failure (%q):\n%s", jf.Failure.Reason, got)
	}
}

// TestRunLocalRanksFilter: only the ranks of --local-ranks-filter are
// printed; the others still count for the summary.
func TestRunLocalRanksFilter(t *testing.T) {
	sc := script{after: 50 * ms, frames: []timedFrame{{0, started(0, 0)}, {0, started(1, 1)},
		{0, line(wire.FrameOut, 0, "zero\n")}, {0, line(wire.FrameOut, 1, "one\n")},
		{0, exited(0, 0, 0, 0, false, time.Now())}, {0, exited(1, 1, 0, 0, false, time.Now())}}}
	c := &cluster{plan: [][]script{{sc}}}
	var out syncBuffer
	if _, err := Run(context.Background(), Options{Attempt: c.attempt, Out: &out, LocalRanks: []int{1}}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "[node1 1 r1] one\n" {
		t.Errorf("out = %q, want rank 1 only", got)
	}
}

// TestRunPhases: a node whose torchrun fails before any worker started
// failed in rendezvous; a worker failing after another finished failed at
// exit.
func TestRunPhases(t *testing.T) {
	noWorker := script{after: 10 * ms, code: 1}
	c := &cluster{plan: [][]script{{noWorker, {stopCode: 143}}}}
	_, err := Run(context.Background(), Options{Attempt: c.attempt})
	var jf *JobFailed
	if !errors.As(err, &jf) || jf.Failure.Phase != "rendezvous (no worker had started)" || jf.Failure.Node != "node1" {
		t.Errorf("err = %v, failure %+v, want node1 in rendezvous", err, jf)
	}
	atExit := script{stopCode: 1, frames: []timedFrame{{0, started(0, 0)}, {0, started(1, 1)}, {0, joined(0)}, {0, joined(1)},
		{5 * ms, exited(0, 0, 0, 0, false, time.Now())}, {5 * ms, exited(1, 1, 2, 0, false, time.Now())}}}
	c = &cluster{plan: [][]script{{atExit}}}
	_, err = Run(context.Background(), Options{Attempt: c.attempt})
	if !errors.As(err, &jf) || jf.Failure.Phase != "exit (other workers had finished)" || jf.Failure.Code != 2 {
		t.Errorf("err = %v, failure %+v, want rank 1's exit 2 at exit", err, jf)
	}
}
