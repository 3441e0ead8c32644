package rank

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/pystack"
	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/wire"
)

func TestRankCPUs(t *testing.T) {
	tests := []struct {
		lists, rank string
		want        []int
		err         bool
	}{
		{"", "0", nil, false},
		{"0-1;2-3", "1", []int{2, 3}, false},
		{"0,4;", "1", nil, false},
		{"0-1;2-3", "2", nil, true},
		{"0-1", "x", nil, true},
		{"0-1;zz", "1", nil, true},
	}
	for _, tt := range tests {
		got, err := rankCPUs(tt.lists, tt.rank)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("rankCPUs(%q, %q) = %v, %v; want %v, err %v", tt.lists, tt.rank, got, err, tt.want, tt.err)
		}
	}
}

// TestMain lets the test binary act as `gorun _rank` (os/exec's helper
// process pattern): GORUN_TEST_RANK_ARGS holds its arguments as JSON.
func TestMain(m *testing.M) {
	if a := os.Getenv("GORUN_TEST_RANK_ARGS"); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			panic(err)
		}
		os.Exit(Run(args, os.Getenv, os.Stderr))
	}
	os.Exit(m.Run())
}

// rankCmd is the test binary as a worker's supervisor running args.
func rankCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	a, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "GORUN_TEST_RANK_ARGS="+string(a), "LOCAL_RANK=1", "RANK=3", "WORLD_SIZE=4"), env...)
	return cmd
}

// relayServer is a stand-in for the node agent's relay socket, collecting
// one worker's frames.
type relayServer struct {
	path    string
	conn    chan net.Conn
	frames  chan frameSeen
	stacks  []pystack.Dump  // FrameStacks seen by collect
	early   []frameSeen     // frames waitOut read past, for collect
	rasDone string          // what followed the rank in FrameRASDone: the lagging ranks
	tap     func(frameSeen) // sees every frame collect reads; nil: none
}

type frameSeen struct {
	kind    byte
	payload []byte
}

func newRelayServer(t *testing.T) *relayServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &relayServer{path: path, conn: make(chan net.Conn, 1), frames: make(chan frameSeen, 1024)}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		r.conn <- c
		br := bufio.NewReader(c)
		for {
			kind, p, err := wire.ReadFrame(br, nil)
			if err != nil {
				close(r.frames)
				return
			}
			r.frames <- frameSeen{kind, append([]byte(nil), p...)}
		}
	}()
	return r
}

// waitOut consumes frames until one of the worker's stdout lines holds
// text.
func (r *relayServer) waitOut(text string) {
	var out string
	for f := range r.frames {
		r.early = append(r.early, f) // collect sees every frame, these first
		if f.kind == wire.FrameOut {
			out += string(f.payload[4:])
			if strings.Contains(out, text) {
				return
			}
		}
	}
}

// collect returns every frame until the worker hung up, with output
// joined per stream.
func (r *relayServer) collect(t *testing.T) (started wire.WorkerStarted, out, errOut string, exit wire.WorkerExit, kinds string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	frames := make(chan frameSeen)
	go func() {
		defer close(frames)
		for _, f := range r.early {
			frames <- f
		}
		for f := range r.frames {
			frames <- f
		}
	}()
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return
			}
			if r.tap != nil {
				r.tap(f)
			}
			kinds += string(f.kind)
			switch f.kind {
			case wire.FrameStarted:
				json.Unmarshal(f.payload, &started)
			case wire.FrameExit:
				json.Unmarshal(f.payload, &exit)
			case wire.FrameRASDone:
				if _, p, err := wire.SplitRank(f.payload); err == nil {
					r.rasDone = string(p)
				}
			case wire.FrameStacks:
				var d pystack.Dump
				if lr, p, err := wire.SplitRank(f.payload); err != nil || lr != 1 || json.Unmarshal(p, &d) != nil {
					t.Errorf("stacks frame for local rank %d (%v): %q", lr, err, p)
				}
				r.stacks = append(r.stacks, d)
			case wire.FrameOut, wire.FrameErr:
				lr, text, err := wire.SplitRank(f.payload)
				if err != nil || lr != 1 {
					t.Errorf("frame for local rank %d (%v), want 1", lr, err)
				}
				if f.kind == wire.FrameOut {
					out += string(text)
				} else {
					errOut += string(text)
				}
			}
		case <-timeout:
			t.Fatal("worker did not hang up")
		}
	}
}

func exitCode(err error) (code int, sig syscall.Signal) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return -1, ws.Signal()
		}
		return ws.ExitStatus(), 0
	}
	return 0, 0
}

// TestWorkerBindsAndExitsAsTheWorker: the worker runs on local rank 1's
// CPUs, and the supervisor exits with the worker's own code.
func TestWorkerBindsAndExitsAsTheWorker(t *testing.T) {
	cmd := rankCmd(t, []string{wire.RankCPUsVar + "=0;0"},
		"--no-python", "--", "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; exit 7")
	out, err := cmd.Output()
	if code, _ := exitCode(err); code != 7 {
		t.Fatalf("exit %v (%v), want 7; output %q", code, err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[1] != "0" {
		t.Fatalf("worker affinity: %q, want CPU 0", out)
	}
}

// TestWorkerRelays: with a relay socket the supervisor reports the start,
// every line of both streams in order, and the exit; nothing goes to its
// own stdout.
func TestWorkerRelays(t *testing.T) {
	r := newRelayServer(t)
	cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path, "GORUN_RESTART_COUNT=2", "TORCHELASTIC_RESTART_COUNT=0"},
		"--no-python", "--", "/bin/sh", "-c",
		`for i in 1 2 3; do echo "line $i"; done; printf 'no newline'; echo oops >&2; echo "rc=$TORCHELASTIC_RESTART_COUNT fh=$PYTHONFAULTHANDLER sock=${GORUN_AGENT_SOCK:-unset}"; exit 3`)
	own, err := cmd.Output()
	if code, _ := exitCode(err); code != 3 {
		t.Fatalf("exit %v (%v), want 3", code, err)
	}
	started, out, errOut, exit, kinds := r.collect(t)
	if len(own) != 0 {
		t.Errorf("supervisor's own stdout %q, want nothing (it all goes to the relay)", own)
	}
	if kinds[0] != wire.FrameStarted || kinds[len(kinds)-1] != wire.FrameExit {
		t.Errorf("frames %q, want started first and exit last", kinds)
	}
	if started.Rank != 3 || started.LocalRank != 1 || started.WorldSize != 4 || started.PID <= 0 {
		t.Errorf("started = %+v", started)
	}
	if want := "line 1\nline 2\nline 3\nno newlinerc=2 fh=1 sock=unset\n"; out != want {
		t.Errorf("stdout relayed %q, want %q", out, want)
	}
	if errOut != "oops\n" {
		t.Errorf("stderr relayed %q", errOut)
	}
	if exit.Code != 3 || exit.Signal != 0 || exit.Stopped || exit.LocalRank != 1 || exit.Time < started.Time {
		t.Errorf("exit = %+v", exit)
	}
}

// TestWorkerTellsSteps: with wire.StepsVar set, the supervisor reads its
// worker's output for steps and checkpoints and tells the head each step
// that advances (wire.FrameStep, the last one before the exit, though it
// came within stepscan.Every of the one before) and each checkpoint line
// (wire.FrameCheckpoint), stderr's too; the worker does not see the
// variable. Unset, it tells nothing.
func TestWorkerTellsSteps(t *testing.T) {
	script := `for i in 1 2 3; do echo "step $i loss 0.1"; done; echo "checkpoint saved" >&2; echo "steps=${GORUN_STEPS:-unset}"; exit 0`
	for _, tc := range []struct {
		name, env string
		on        bool
	}{
		{"defaults", wire.StepsVar + "={}", true},
		{"off", "GORUN_OTHER=1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelayServer(t)
			cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path, tc.env}, "--no-python", "--", "/bin/sh", "-c", script)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			var steps []string
			checkpoints := 0
			r.tap = func(f frameSeen) {
				_, p, _ := wire.SplitRank(f.payload)
				switch f.kind {
				case wire.FrameStep:
					n, age, _ := strings.Cut(string(p), " ")
					if a, err := strconv.ParseInt(age, 10, 64); err != nil || a < 0 || a > int64(time.Second) {
						t.Errorf("step frame %q: its age is no duration under a second", p)
					}
					steps = append(steps, n)
				case wire.FrameCheckpoint:
					checkpoints++
				}
			}
			_, out, _, _, _ := r.collect(t)
			// Which steps between come depends on how the lines were read;
			// they go up, and the last is 3.
			ordered := slices.IsSortedFunc(steps, func(a, b string) int { return strings.Compare(a, b) }) && !slices.Contains(steps, "")
			switch {
			case tc.on && (len(steps) == 0 || steps[len(steps)-1] != "3" || !ordered || checkpoints != 1):
				t.Errorf("told steps %q and %d checkpoints, want steps rising to 3 and 1 checkpoint", steps, checkpoints)
			case !tc.on && (len(steps) != 0 || checkpoints != 0):
				t.Errorf("told steps %q and %d checkpoints with %s unset, want none", steps, checkpoints, wire.StepsVar)
			}
			if !strings.Contains(out, "steps=unset") {
				t.Errorf("the worker sees %s: %q", wire.StepsVar, out)
			}
		})
	}
}

// TestWorkerDeathBySignal: a worker killed by a signal nobody sent through
// the supervisor is a failure of its own, and the supervisor dies by the
// same signal.
func TestWorkerDeathBySignal(t *testing.T) {
	r := newRelayServer(t)
	cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path}, "--no-python", "--", "/bin/sh", "-c", "kill -KILL $$")
	err := cmd.Run()
	if _, sig := exitCode(err); sig != syscall.SIGKILL {
		t.Fatalf("supervisor ended with %v, want killed by SIGKILL", err)
	}
	_, _, _, exit, _ := r.collect(t)
	if exit.Signal != int(syscall.SIGKILL) || exit.Code != -1 || exit.Stopped {
		t.Errorf("exit = %+v, want SIGKILL, not stopped", exit)
	}
}

// TestWorkerForwardsStop: SIGTERM to the supervisor reaches the worker
// once, the exit says it was stopped, and the supervisor dies by SIGTERM.
func TestWorkerForwardsStop(t *testing.T) {
	r := newRelayServer(t)
	cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path}, "--no-python", "--", "/bin/sh", "-c",
		`trap 'echo got TERM; exit 143' TERM; echo ready; while :; do sleep 0.05; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.waitOut("ready")
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	_, _, _, exit, _ := r.collect(t)
	if code, _ := exitCode(err); code != 143 {
		t.Errorf("supervisor ended with %v, want exit 143 as the worker", err)
	}
	if !exit.Stopped || exit.Code != 143 {
		t.Errorf("exit = %+v, want code 143, stopped", exit)
	}
}

// TestWorkerDumpsStacks: asked for stacks, a Python worker without py-spy
// dumps every thread's traceback through faulthandler and ends; its end
// counts as a stop. The dump goes to the head as one stacks frame, read
// here with the script's source lines, before the exit, and not as
// output; the worker's other stderr lines still go as output.
func TestWorkerDumpsStacks(t *testing.T) {
	py, err := exec.LookPath("python3")
	testenv.Need(t, err == nil, "python3 is not on PATH")
	script := filepath.Join(t.TempDir(), "stuck.py")
	os.WriteFile(script, []byte("import sys, time\ndef stuck():\n    print('ready', flush=True)\n    time.sleep(60)  # here\nprint('oops', file=sys.stderr, flush=True)\nstuck()\n"), 0o644)
	r := newRelayServer(t)
	cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path, "PATH=/usr/bin:/bin", "PYTHON_EXEC=" + py},
		"--", script)
	var own strings.Builder
	cmd.Stderr = &own
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn := <-r.conn
	r.waitOut("ready")
	// "ready" is relayed as soon as it is flushed, and the worker may not
	// have reached its sleep on line 4 yet (CI saw the dump at line 3,
	// under load): a moment lets it get there.
	time.Sleep(300 * time.Millisecond)
	conn.Write([]byte{wire.TellDump})
	err = cmd.Wait()
	if _, sig := exitCode(err); sig != syscall.SIGABRT || strings.Contains(own.String(), "goroutine") {
		t.Errorf("supervisor ended with %v, want SIGABRT as the worker and no Go dump; stderr %q", err, own.String())
	}
	_, _, errOut, exit, kinds := r.collect(t)
	if errOut != "oops\n" {
		t.Errorf("stderr relayed %q, want the line before the dump only (frames %q, stacks %+v)", errOut, kinds, r.stacks)
	}
	if k := strings.IndexRune(kinds, rune(wire.FrameStacks)); k < 0 || k > strings.IndexRune(kinds, rune(wire.FrameExit)) || len(r.stacks) != 1 {
		t.Fatalf("frames %q: want one stacks frame before the exit", kinds)
	}
	d := r.stacks[0]
	if !strings.Contains(d.Text, "Fatal Python error: Aborted") || d.Tool != pystack.ToolFaulthandler || len(d.Threads) != 1 {
		t.Fatalf("dump = %+v", d)
	}
	if f := d.Threads[0].Frames[0]; f.File != script || f.Line != 4 || f.Func != "stuck" || f.Source != "time.sleep(60)  # here" {
		t.Errorf("innermost frame = %+v, want stuck.py:4 with its source", f)
	}
	if exit.Signal != int(syscall.SIGABRT) || !exit.Stopped {
		t.Errorf("exit = %+v, want SIGABRT, stopped", exit)
	}
}

// TestWorkerInterpreter: the worker's Python is torchrun's sys.executable,
// read from the parent's argv[0], which keeps a virtualenv's path.
func TestWorkerInterpreter(t *testing.T) {
	if os.Getenv("GORUN_TEST_PRINT_INTERPRETER") == "1" {
		os.Stdout.WriteString(interpreter(os.Getenv, os.Getppid()))
		os.Exit(0)
	}
	cmd := exec.Command("/bin/sh", "-c", `"$0" -test.run=^TestWorkerInterpreter$; true`, os.Args[0])
	cmd.Args[0] = "/opt/venv/bin/python3.11" // how the kernel starts a "#!/opt/venv/bin/python3.11" script
	cmd.Env = append(os.Environ(), "GORUN_TEST_PRINT_INTERPRETER=1", "PYTHON_EXEC=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "/opt/venv/bin/python3.11" {
		t.Errorf("interpreter = %q, want the parent's argv[0]", out)
	}
	if got := interpreter(func(string) string { return "/x/python" }, os.Getpid()); got != "/x/python" {
		t.Errorf("PYTHON_EXEC: got %q", got)
	}
}

func TestWorkerBadArgs(t *testing.T) {
	for _, args := range [][]string{{}, {"--"}, {"--bogus", "--", "x"}} {
		if code := Run(args, func(string) string { return "" }, new(strings.Builder)); code != 127 {
			t.Errorf("Run(%q) = %d, want 127", args, code)
		}
	}
}

// TestWorkerReportsJoin: once the worker holds a connection to
// MASTER_PORT (the rendezvous store), the supervisor says so, which ends
// the worker's start-up phase.
func TestWorkerReportsJoin(t *testing.T) {
	store, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	go func() {
		for {
			c, err := store.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	port := strconv.Itoa(store.Addr().(*net.TCPAddr).Port)
	r := newRelayServer(t)
	cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path, "MASTER_PORT=" + port},
		"--no-python", "--", "/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port+"; sleep 0.5")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, kinds := r.collect(t); !strings.ContainsRune(kinds, rune(wire.FrameInit)) {
		t.Errorf("frames %q: no join reported", kinds)
	}
}

// TestWorkerDumpsWithPySpy: where py-spy is on the PATH the supervisor
// sends its dump, read from py-spy's JSON with source lines, and the
// worker lives on. py-spy cannot be installed on the test machines, so a
// script stands in for it here: it checks the arguments it gets and, like
// a py-spy that cannot unwind native frames, fails with --native, so the
// supervisor asks again without; the real one is used wherever it is
// installed.
func TestWorkerDumpsWithPySpy(t *testing.T) {
	bin := t.TempDir()
	train := filepath.Join(bin, "train.py")
	os.WriteFile(train, []byte("import time\n\ndef stuck():\n    time.sleep(5)\n"), 0o644)
	spy := "#!/bin/sh\n[ \"$1 $2 $3\" = \"dump --json --pid\" ] || exit 3\n" +
		`echo '[{"thread_id": 1, "thread_name": "MainThread", "os_thread_id": '$4', "active": false, "owns_gil": false,` +
		` "frames": [{"name": "stuck", "filename": "` + train + `", "module": null, "short_filename": "train.py", "line": 4}]}]'` + "\n"
	if err := os.WriteFile(filepath.Join(bin, "py-spy"), []byte(spy), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRelayServer(t)
	cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path, "PATH=" + bin + ":/usr/bin:/bin"},
		"--no-python", "--", "/bin/sh", "-c", "echo ready; sleep 1; echo still alive")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn := <-r.conn
	r.waitOut("ready")
	conn.Write([]byte{wire.TellDump})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the worker did not live on: %v", err)
	}
	_, out, errOut, exit, kinds := r.collect(t)
	if errOut != "" || len(r.stacks) != 1 {
		t.Fatalf("stderr relayed %q, %d stacks frames; want the dump as one stacks frame", errOut, len(r.stacks))
	}
	d := r.stacks[0]
	want := "Thread " + d.Threads[0].ID + " (idle): \"MainThread\"\n    stuck (train.py:4)\n"
	if d.Tool != pystack.ToolPySpy || d.Text != want || len(d.Threads) != 1 || d.Threads[0].Frames[0].Source != "time.sleep(5)" {
		t.Errorf("dump = %+v, want text %q and the source line", d, want)
	}
	if !strings.ContainsRune(kinds, rune(wire.FrameDumped)) || !strings.Contains(out, "still alive") || exit.Code != 0 || exit.Stopped {
		t.Errorf("frames %q, out %q, exit %+v", kinds, out, exit)
	}
}

// TestWorkerLeftoverHoldsOutput: a worker that exits leaving a child with
// its stdout open still ends its supervisor, with its own code, within
// moments, as torchrun sees a plain worker end.
func TestWorkerLeftoverHoldsOutput(t *testing.T) {
	r := newRelayServer(t)
	// The leftover writes its PID before the worker exits, so the test
	// ends it by that PID.
	pidFile := filepath.Join(t.TempDir(), "leftover.pid")
	cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path}, "--no-python", "--", "/bin/sh", "-c",
		`echo bye; (setsid sh -c 'echo $$ > "$0"; exec sleep 30' "$1" &); while [ ! -s "$1" ]; do sleep 0.01; done; exit 4`, "sh", pidFile)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	start := time.Now()
	err := cmd.Run()
	if code, _ := exitCode(err); code != 4 {
		t.Fatalf("exit %v, want 4", err)
	}
	if took := time.Since(start); took > outputDrain+3*time.Second {
		t.Errorf("the supervisor took %v to end", took)
	}
	_, out, _, exit, _ := r.collect(t)
	if out != "bye\n" || exit.Code != 4 {
		t.Errorf("out %q, exit %+v", out, exit)
	}
}

// TestWorkerMergedOutput: where the head's stdout and stderr are one file,
// the worker's two streams are one pipe, relayed as stdout in the order
// written; with --tee/--redirects (echo) they stay apart for torchrun's
// files.
func TestWorkerMergedOutput(t *testing.T) {
	const script = `for i in 1 2 3 4 5 6 7 8 9; do echo "out $i"; echo "err $i" >&2; done`
	var want strings.Builder
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&want, "out %d\nerr %d\n", i, i)
	}
	for _, tt := range []struct {
		name string
		env  []string
	}{
		{"merged", []string{wire.MergedOutputVar + "=1"}},
		{"apart", nil},
		{"echo keeps them apart", []string{wire.MergedOutputVar + "=1", wire.WorkerEchoVar + "=1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRelayServer(t)
			cmd := rankCmd(t, append([]string{wire.RelaySocketVar + "=" + r.path}, tt.env...), "--no-python", "--", "/bin/sh", "-c", script)
			if err := cmd.Run(); err != nil {
				t.Fatal(err)
			}
			_, out, errOut, _, _ := r.collect(t)
			if tt.name == "merged" {
				if out != want.String() || errOut != "" {
					t.Errorf("stdout %q, stderr %q; want all on stdout, in order: %q", out, errOut, want.String())
				}
				return
			}
			if strings.Count(out, "out ") != 9 || strings.Contains(out, "err") || strings.Count(errOut, "err ") != 9 {
				t.Errorf("stdout %q, stderr %q; want them apart", out, errOut)
			}
		})
	}
}

// fakePool is a stand-in for the node agent's worker pool: it reads each
// supervisor's request and answers with reply, or, with reply "", never,
// and says when the supervisor hung up.
func fakePool(t *testing.T, reply string) (sock string, hungUp chan struct{}) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "pool")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	hungUp = make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := br.ReadBytes('\n'); err != nil {
			return
		}
		if reply != "" {
			c.Write([]byte(reply + "\n"))
		}
		io.Copy(io.Discard, br)
		close(hungUp)
	}()
	return sock, hungUp
}

// TestWorkerStoppedBeforeStart: a stop that comes while the node's pool
// still imports, from the agent through the pool or as a signal to the
// supervisor, means the worker never starts (a stop's SIGINT in its
// import may be lost), and the supervisor ends at once by the stop's
// signal, as the worker would have.
func TestWorkerStoppedBeforeStart(t *testing.T) {
	_, err := exec.LookPath("python3")
	testenv.Need(t, err == nil, "python3 is not on PATH")
	for _, tc := range []struct {
		name  string
		reply string         // the pool's answer; "": none
		sig   syscall.Signal // sent to the supervisor while it waits; 0: none
		want  syscall.Signal
	}{
		{"the agent's stop, through the pool", `{"cold":"the job was stopped before its worker started","stopped":15}`, 0, syscall.SIGTERM},
		{"a stop signal while the pool imports", "", syscall.SIGINT, syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ran := filepath.Join(dir, "ran")
			script := filepath.Join(dir, "job.py")
			if err := os.WriteFile(script, []byte("open("+strconv.Quote(ran)+", 'w').close()\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			sock, hungUp := fakePool(t, tc.reply)
			r := newRelayServer(t)
			cmd := rankCmd(t, []string{wire.RelaySocketVar + "=" + r.path, wire.PoolSocketVar + "=" + sock, "PYTHON_EXEC=/usr/bin/python3"}, "--", script)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.sig != 0 {
				time.Sleep(300 * time.Millisecond) // it asked the pool, which does not answer
				cmd.Process.Signal(tc.sig)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatal("the supervisor did not end")
			}
			if _, sig := exitCode(err); sig != tc.want {
				t.Errorf("supervisor ended with %v, want death by %v", err, tc.want)
			}
			select {
			case <-hungUp:
			case <-time.After(5 * time.Second):
				t.Error("the supervisor did not hang up on the pool")
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("the worker ran after the stop")
			}
			if _, _, _, _, kinds := r.collect(t); strings.ContainsRune(kinds, rune(wire.FrameStarted)) {
				t.Errorf("frames %q: a worker that never ran was announced", kinds)
			}
		})
	}
}
