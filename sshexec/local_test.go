package sshexec

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// newTestLocal returns a Local whose agent is this test binary.
func newTestLocal(t *testing.T) *Local {
	t.Helper()
	l := NewLocal(os.Args[0])
	l.agentEnv = append(os.Environ(), testAgentEnv+"=1")
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// syncBuffer is a bytes.Buffer safe for the copying goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func waitWithin(t *testing.T, p Process, limit time.Duration) (int, error) {
	t.Helper()
	type result struct {
		code int
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		code, err := p.Wait()
		ch <- result{code, err}
	}()
	select {
	case r := <-ch:
		return r.code, r.err
	case <-time.After(limit):
		t.Fatalf("Wait did not return within %v", limit)
		return 0, nil
	}
}

func TestLocalNode(t *testing.T) {
	if got := NewLocal("gorun").Node(); got != "localhost" {
		t.Errorf("Node() = %q, want localhost", got)
	}
}

func TestLocalExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   int
	}{
		{"zero", "exit 0", 0},
		{"three", "exit 3", 3},
		{"sigkill", "kill -9 $$", 137},
	}
	l := newTestLocal(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := l.Start(context.Background(), wire.Job{Argv: []string{"/bin/sh", "-c", tc.script}}, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			code, err := waitWithin(t, p, 10*time.Second)
			if err != nil || code != tc.want {
				t.Errorf("Wait() = %d, %v; want %d, nil", code, err, tc.want)
			}
		})
	}
}

// TestLocalOutputBytes: output arrives byte for byte: binary data, a long
// line, no newline at the end, stdout and stderr kept apart.
func TestLocalOutputBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outData := make([]byte, 256<<10)
	if _, err := rand.Read(outData); err != nil {
		t.Fatal(err)
	}
	outData = append(outData, bytes.Repeat([]byte("long line "), 100<<10)...)
	outData = append(outData, "\nno newline at the end"...)
	errData := []byte("to stderr: ünïcødé\r\n\x00 and no newline")
	outFile, errFile := filepath.Join(dir, "out"), filepath.Join(dir, "err")
	if err := os.WriteFile(outFile, outData, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(errFile, errData, 0o644); err != nil {
		t.Fatal(err)
	}
	l := newTestLocal(t)
	var stdout, stderr syncBuffer
	job := wire.Job{Argv: []string{"/bin/sh", "-c", `cat "$1"; cat "$2" >&2`, "sh", outFile, errFile}}
	p, err := l.Start(context.Background(), job, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := waitWithin(t, p, 20*time.Second); code != 0 || err != nil {
		t.Fatalf("Wait() = %d, %v", code, err)
	}
	if got := stdout.Bytes(); !bytes.Equal(got, outData) {
		t.Errorf("stdout: got %d bytes, want %d, equal prefix %d", len(got), len(outData), commonPrefix(got, outData))
	}
	if got := stderr.Bytes(); !bytes.Equal(got, errData) {
		t.Errorf("stderr = %q, want %q", got, errData)
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestLocalEnvBytes: environment values reach the job byte for byte and
// are never interpreted by a shell on the way.
func TestLocalEnvBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	values := []string{
		`it's "quoted"`,
		"$(touch " + pwned + ") `touch " + pwned + "`",
		"line1\nline2\n",
		"ünï©ødé ✓ 日本語",
		" leading and trailing ",
		`back\slash \n \\`,
		"",
		"=a=b=",
		"*; ls &",
	}
	env := map[string]string{}
	script := ""
	for i, v := range values {
		name := "GORUN_TEST_V" + string(rune('A'+i))
		env[name] = v
		script += `printf '%s\0' "$` + name + `"; `
	}
	l := newTestLocal(t)
	var stdout syncBuffer
	p, err := l.Start(context.Background(), wire.Job{Argv: []string{"/bin/sh", "-c", script}, Env: env}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := waitWithin(t, p, 10*time.Second); code != 0 || err != nil {
		t.Fatalf("Wait() = %d, %v", code, err)
	}
	got := strings.Split(string(stdout.Bytes()), "\x00")
	want := append(append([]string{}, values...), "")
	if len(got) != len(want) {
		t.Fatalf("got %d values %q, want %d", len(got), got, len(want))
	}
	for i := range values {
		if got[i] != values[i] {
			t.Errorf("value %d = %q, want %q", i, got[i], values[i])
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Error("a command substitution in an env value was executed")
	}
}

// TestLocalStop stops a torchrun-shaped tree through the Process API.
func TestLocalStop(t *testing.T) {
	t.Parallel()
	const grace = 800 * time.Millisecond
	tests := []struct {
		name     string
		stop     func(p Process)
		min, max time.Duration
		want     int
	}{
		{
			name: "graceful, twice",
			stop: func(p Process) { p.Stop(false); p.Stop(false) },
			min:  grace, max: grace + time.Second, want: 143,
		},
		{
			name: "now",
			stop: func(p Process) { p.Stop(true); p.Stop(true) },
			max:  grace / 2, want: 137,
		},
		{
			name: "graceful then now",
			stop: func(p Process) { p.Stop(false); time.Sleep(grace / 4); p.Stop(true) },
			max:  grace * 3 / 4, want: 143,
		},
	}
	l := newTestLocal(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t, 2, nil)
			killLeftovers(t, tr.pids)
			tr.job.Grace = grace
			var stderr syncBuffer
			p, err := l.Start(context.Background(), tr.job, io.Discard, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			pids := tr.waitRunning(t)
			start := time.Now()
			tc.stop(p)
			code, err := waitWithin(t, p, tc.max+2*time.Second)
			took := time.Since(start)
			if err != nil || code != tc.want {
				t.Errorf("Wait() = %d, %v; want %d, nil; stderr: %s", code, err, tc.want, stderr.Bytes())
			}
			if live := livePids(pids); len(live) > 0 {
				t.Errorf("processes left: %v", live)
			}
			if took < tc.min*9/10 || took > tc.max {
				t.Errorf("tree gone after %v, want between %v and %v", took, tc.min, tc.max)
			}
		})
	}
}

// TestLocalClose: Close stops what runs and refuses new jobs.
func TestLocalClose(t *testing.T) {
	t.Parallel()
	l := newTestLocal(t)
	tr := newTree(t, 1, nil)
	killLeftovers(t, tr.pids)
	tr.job.Grace = 300 * time.Millisecond
	p, err := l.Start(context.Background(), tr.job, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pids := tr.waitRunning(t)
	done := make(chan error, 1)
	go func() { done <- l.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if live := livePids(pids); len(live) > 0 {
		t.Errorf("processes left after Close: %v", live)
	}
	if code, err := waitWithin(t, p, time.Second); code != 143 || err != nil {
		t.Errorf("Wait() = %d, %v; want 143, nil", code, err)
	}
	if _, err := l.Start(context.Background(), tr.job, io.Discard, io.Discard); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: err = %v, want ErrClosed", err)
	}
}

func TestLocalStartErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := newTestLocal(t)
	if _, err := l.Start(ctx, wire.Job{Argv: []string{"true"}}, io.Discard, io.Discard); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: err = %v, want context.Canceled", err)
	}
	missing := NewLocal(filepath.Join(t.TempDir(), "no-gorun"))
	if _, err := missing.Start(context.Background(), wire.Job{Argv: []string{"true"}}, io.Discard, io.Discard); err == nil {
		t.Error("missing agent binary: Start succeeded")
	}
}

func TestLocalOutput(t *testing.T) {
	t.Parallel()
	l := NewLocal("unused")
	tests := []struct {
		name    string
		argv    []string
		want    string
		wantErr string
	}{
		{name: "stdout", argv: []string{"/bin/sh", "-c", "printf 'a b\\n'; echo err >&2"}, want: "a b\n"},
		{name: "failure carries stderr", argv: []string{"/bin/sh", "-c", "echo bad thing >&2; exit 4"}, wantErr: "bad thing"},
		{name: "missing", argv: []string{"gorun-no-such-program"}, wantErr: "gorun-no-such-program"},
		{name: "empty", argv: nil, wantErr: "empty command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := l.Output(context.Background(), tc.argv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("Output() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("cancel kills the group", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		// The grandchild holds stdout: only a group kill ends this quickly.
		_, err := l.Output(ctx, []string{"/bin/sh", "-c", "sleep 100 & sleep 100"})
		if err == nil {
			t.Fatal("Output succeeded")
		}
		if took := time.Since(start); took > outputWaitDelay {
			t.Errorf("Output returned after %v", took)
		}
	})
}

// blockingWriter accepts the first write (the job line) and blocks every
// later one until closed, like a hung agent behind a full pipe.
type blockingWriter struct {
	mu     sync.Mutex
	writes int
	got    []byte
	closed chan struct{}
	once   sync.Once
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	first := w.writes == 1
	if first {
		w.got = append(w.got, p...)
	}
	w.mu.Unlock()
	if first {
		return len(p), nil
	}
	<-w.closed
	return 0, io.ErrClosedPipe
}

func (w *blockingWriter) Close() error {
	w.once.Do(func() { close(w.closed) })
	return nil
}

// TestAttachAgentBlockedStdin: a stdin write that blocks never blocks Stop
// or Wait, and Wait reports a lost agent.
func TestAttachAgentBlockedStdin(t *testing.T) {
	t.Parallel()
	stdin := &blockingWriter{closed: make(chan struct{})}
	exited := make(chan struct{})
	lost := errors.New("connection lost")
	wait := func() (int, error) { <-exited; return -1, lost }
	var out syncBuffer
	p, err := attachAgent(wire.Job{Argv: []string{"x"}}, stdin, strings.NewReader("out"), strings.NewReader(""), &out, io.Discard, wait)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Stop(false) // the writer goroutine blocks on this one
	time.Sleep(50 * time.Millisecond)
	p.Stop(true)
	p.Stop(false)
	if took := time.Since(start); took > time.Second {
		t.Errorf("Stop blocked for %v", took)
	}
	close(exited)
	code, err := waitWithin(t, p, 2*time.Second)
	if code != -1 || !errors.Is(err, lost) {
		t.Errorf("Wait() = %d, %v; want -1, %v", code, err, lost)
	}
	if string(out.Bytes()) != "out" {
		t.Errorf("stdout = %q, want %q", out.Bytes(), "out")
	}
	if !strings.HasPrefix(string(stdin.got), fmt.Sprintf(`{"protocol":%d,"argv":["x"]`, wire.Protocol)) || !strings.HasSuffix(string(stdin.got), "}\n") {
		t.Errorf("job line = %q", stdin.got)
	}
}

// recordingWriter records what the head sends.
type recordingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, io.ErrClosedPipe
	}
	return w.buf.Write(p)
}

func (w *recordingWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

// TestAttachAgentControlBytes: a heartbeat every HeartbeatInterval, each
// stop level sent once and in order, nothing after the agent exited.
func TestAttachAgentControlBytes(t *testing.T) {
	t.Parallel()
	stdin := &recordingWriter{}
	exited := make(chan struct{})
	p, err := attachAgent(wire.Job{Argv: []string{"x"}}, stdin, strings.NewReader(""), strings.NewReader(""),
		io.Discard, io.Discard, func() (int, error) { <-exited; return 9, nil })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*HeartbeatInterval + HeartbeatInterval/2)
	p.Stop(false)
	p.Stop(false)
	time.Sleep(50 * time.Millisecond) // let 't' go out before 'k' supersedes it
	p.Stop(true)
	p.Stop(true)
	time.Sleep(100 * time.Millisecond)
	close(exited)
	if code, err := waitWithin(t, p, time.Second); code != 9 || err != nil {
		t.Errorf("Wait() = %d, %v; want 9, nil", code, err)
	}
	p.Stop(true) // after exit: harmless
	stdin.mu.Lock()
	sent := stdin.buf.String()
	closed := stdin.closed
	stdin.mu.Unlock()
	_, ctl, ok := strings.Cut(sent, "\n")
	if !ok {
		t.Fatalf("no job line in %q", sent)
	}
	// A stop with the job's own signal and grace (zeros), then the kill.
	if want := "hh" + string(appendTerm(nil, false, 0, 0)) + "k"; ctl != want {
		t.Errorf("control bytes = %q, want %q", ctl, want)
	}
	if !closed {
		t.Error("stdin not closed after the agent exited")
	}
}

func TestAttachAgentSendFails(t *testing.T) {
	t.Parallel()
	stdin := &recordingWriter{closed: true}
	waited := make(chan struct{})
	_, err := attachAgent(wire.Job{Argv: []string{"x"}}, stdin, strings.NewReader(""), strings.NewReader(""),
		io.Discard, io.Discard, func() (int, error) { close(waited); return 1, nil })
	if err == nil {
		t.Fatal("attachAgent succeeded with a closed stdin")
	}
	select {
	case <-waited:
	case <-time.After(2 * time.Second):
		t.Error("agent not reaped after a failed attach")
	}
}

func countFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestLocalCycles: ten start/stop cycles leave no process, goroutine or
// file descriptor behind. Not parallel: it counts the whole test binary's
// goroutines and descriptors.
func TestLocalCycles(t *testing.T) {
	l := NewLocal(os.Args[0])
	l.agentEnv = append(os.Environ(), testAgentEnv+"=1")
	runtime.GC()
	goroutines, fds := runtime.NumGoroutine(), countFds(t)
	var all []int
	for i := range 10 {
		tr := newTree(t, 2, nil)
		killLeftovers(t, tr.pids)
		tr.job.Grace = 200 * time.Millisecond
		p, err := l.Start(context.Background(), tr.job, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		pids := tr.waitRunning(t)
		all = append(all, pids...)
		p.Stop(i%2 == 1)
		if _, err := waitWithin(t, p, 5*time.Second); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if live := livePids(pids); len(live) > 0 {
			t.Fatalf("cycle %d: processes left: %v", i, live)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if live := livePids(all); len(live) > 0 {
		t.Errorf("processes left: %v", live)
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines: %d before, %d after\n%s", goroutines, n, buf)
	}
	if n := countFds(t); n > fds {
		t.Errorf("open fds: %d before, %d after", fds, n)
	}
	l.mu.Lock()
	left := len(l.procs)
	l.mu.Unlock()
	if left != 0 {
		t.Errorf("Local still tracks %d processes", left)
	}
}

// testAgentOutputEnv makes the test binary act as gorun's hidden
// subcommands for Local.AgentOutput (helper-process pattern).
const testAgentOutputEnv = "GORUN_TEST_AGENT_OUTPUT"

// agentOutputHelper is the test binary run as `gorun <args>`.
func agentOutputHelper(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "no subcommand")
		return 2
	}
	switch args[0] {
	case "_echo": // each argument on a line; a note on stderr
		for _, a := range args[1:] {
			fmt.Println(a)
		}
		fmt.Fprintln(os.Stderr, "a note")
		return 0
	case "_big": // more than a frame holds, after the parent's command line
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", os.Getppid()))
		fmt.Println(strings.ReplaceAll(string(b), "\x00", " "))
		os.Stdout.Write(bytes.Repeat([]byte("x"), 2<<20))
		return 0
	case "_parent": // the parent's command line
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", os.Getppid()))
		fmt.Println(strings.ReplaceAll(string(b), "\x00", " "))
		return 0
	case "_fail": // much stderr, the reason last, exit 3
		fmt.Print("partial")
		fmt.Fprint(os.Stderr, strings.Repeat("noise ", 2000))
		fmt.Fprint(os.Stderr, "\nthe real reason\n")
		return 3
	case "_hang": // a grandchild holding stdout, both pids in args[1]; never exits
		sleep := exec.Command("sleep", "100")
		sleep.Stdout = os.Stdout
		if err := sleep.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		pids := fmt.Sprintf("%d %d\n", os.Getpid(), sleep.Process.Pid)
		if err := os.WriteFile(args[1]+".tmp", []byte(pids), 0o600); err != nil {
			return 2
		}
		os.Rename(args[1]+".tmp", args[1])
		select {}
	case "_ahead": // started ahead ("-"): its argument on stdin
		if len(args) == 2 && args[1] == "-" {
			if f := os.Getenv("GORUN_TEST_AHEAD_PID"); f != "" {
				os.WriteFile(f+".tmp", []byte(strconv.Itoa(os.Getpid())+" "+strconv.Itoa(os.Getppid())), 0o600)
				os.Rename(f+".tmp", f)
			}
			line, err := bufio.NewReader(os.Stdin).ReadString('\n')
			if err != nil {
				return 3
			}
			fmt.Println("ahead", strings.TrimSuffix(line, "\n"))
			return 0
		}
		fmt.Println("direct", strings.Join(args[1:], " "))
		return 0
	case "_killself":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	fmt.Fprintf(os.Stderr, "unknown subcommand %q\n", args[0])
	return 2
}

// newAgentOutputLocal returns a Local whose gorun is this test binary in
// helper mode.
func newAgentOutputLocal(t *testing.T) *Local {
	t.Helper()
	l := NewLocal(os.Args[0])
	l.agentEnv = append(os.Environ(), testAgentOutputEnv+"=1")
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestLocalAgentOutput(t *testing.T) {
	t.Parallel()
	l := newAgentOutputLocal(t)
	tests := []struct {
		name     string
		args     []string
		want     string
		wantErr  []string // in the error
		exitCode int      // of the *ExitError, when non-zero
	}{
		{name: "stdout only", args: []string{"_echo", "a b", `{"json":1}`}, want: "a b\n{\"json\":1}\n"},
		{name: "no args", args: nil, wantErr: []string{"no subcommand"}, exitCode: 2},
		{name: "exit code and the stderr tail", args: []string{"_fail"}, want: "partial",
			wantErr: []string{"the real reason", "exit code 3", "_fail"}, exitCode: 3},
		{name: "killed by a signal", args: []string{"_killself"}, wantErr: []string{"killed by SIGKILL"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := l.AgentOutput(context.Background(), tc.args...)
			if string(got) != tc.want {
				t.Errorf("stdout = %q, want %q", got, tc.want)
			}
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if len(err.Error()) > wire.StderrTail+500 {
				t.Errorf("error is %d bytes: the stderr tail is not bounded", len(err.Error()))
			}
			var ee *ExitError
			if tc.exitCode != 0 && (!errors.As(err, &ee) || ee.Code != tc.exitCode) {
				t.Errorf("err = %v, want an *ExitError with code %d", err, tc.exitCode)
			}
		})
	}
	t.Run("missing binary", func(t *testing.T) {
		_, err := NewLocal(filepath.Join(t.TempDir(), "gorun")).AgentOutput(context.Background(), "_collect")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want fs.ErrNotExist", err)
		}
	})
}

// TestLocalAgentOutputCancel: ending ctx kills a child that hangs, and the
// grandchild holding its stdout, within a second.
func TestLocalAgentOutputCancel(t *testing.T) {
	t.Parallel()
	l := newAgentOutputLocal(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	killLeftovers(t, pidFile)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	var cancelled time.Time
	go func() {
		_, err := l.AgentOutput(ctx, "_hang", pidFile)
		done <- result{err, time.Since(cancelled)}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pids := readPids(t, pidFile)
	cancelled = time.Now()
	cancel()
	var res result
	select {
	case res = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("AgentOutput did not return after the cancel")
	}
	if res.took > time.Second {
		t.Errorf("returned %v after the cancel, want within 1 s", res.took)
	}
	if !errors.Is(res.err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", res.err)
	}
	// The grandchild is gone too (a zombie of an exited parent counts as
	// gone), within a moment: SIGKILL is sent before AgentOutput returns,
	// but the kernel may still be tearing a process down (CI saw one alive
	// 20 ms after the cancel, under load).
	for _, pid := range pids {
		for deadline := time.Now().Add(2 * time.Second); alive(pid) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("pid %d survived the cancel by 2 s", pid)
		}
	}
}

// alive reports whether pid runs: it exists and is not a zombie.
func alive(pid int) bool {
	state, _, ok := stateAndParent(pid)
	return ok && state != 'Z'
}

// stateAndParent reads pid's state and parent from /proc/PID/stat: the
// fields after the command name, which may hold spaces and parentheses.
func stateAndParent(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, parent, ok := stateAndParent(pid); ok && parent == ppid {
			pids = append(pids, pid)
		}
	}
	return pids
}
