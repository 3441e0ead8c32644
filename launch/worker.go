package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/cpuset"
	"github.com/gorun/gorun/sshexec"
)

// Variables the worker's supervisor reads or sets.
const (
	// HeartbeatFileVar names a file a quiet script may touch to show
	// progress; the supervisor creates one unless the user set the name.
	HeartbeatFileVar = "GORUN_HEARTBEAT_FILE"
	// RestartCountVar is the attempt number of the whole group (0 first);
	// the supervisor copies it to torchrun's TORCHELASTIC_RESTART_COUNT.
	RestartCountVar = "GORUN_RESTART_COUNT"
)

// How often the supervisor looks at the heartbeat file, and at the
// worker's connection to the store until it has joined: often at first,
// since a worker may crash a moment after it joined, and the phase of its
// failure should still be right.
const (
	pollEvery   = time.Second
	pollJoining = 50 * time.Millisecond
)

// RunWorker is `gorun _rank [--no-python | -m] -- script args...`, which
// torchrun starts in place of each worker. It stays the worker's parent:
//
//   - it starts the interpreter torchrun itself runs under (torchrun's
//     sys.executable: $PYTHON_EXEC, else the argv[0] of its parent, which
//     keeps a virtualenv's path), as `<python> -u [-m] script args`, bound
//     to the local rank's CPUs from envplan.RankCPUsVar;
//   - it forwards every signal it gets to the worker;
//   - it reports to the node agent over the relay socket: started, every
//     output line, progress, the exit; and prints the worker's stacks when
//     the head asks;
//   - it exits exactly as the worker did, with its code or by its signal,
//     so torchrun sees what it would have seen without gorun.
//
// Without a relay socket (not started by gorun's agent) the worker's output
// goes straight to this process's stdout and stderr. RunWorker returns an
// exit code only when the worker could not start; otherwise it does not
// return.
func RunWorker(args []string, getenv func(string) string, stderr io.Writer) int {
	cmd, err := workerCommand(args, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "gorun %s: %v\n", envplan.RankCommand, err)
		return 127
	}
	w := &worker{localRank: atoi(getenv("LOCAL_RANK"), -1), rank: atoi(getenv("RANK"), -1), stderr: stderr}
	cmd.Env = workerEnv(os.Environ(), getenv)
	if sock := getenv(sshexec.RelaySocketVar); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			w.conn = c
		} else {
			fmt.Fprintf(stderr, "gorun %s: cannot reach the node agent (%v); output goes to torchrun\n", envplan.RankCommand, err)
		}
	}
	if dir := getenv(envplan.FlightRecorderDirVar); dir != "" {
		// torch writes its flight-recorder dump there but makes no folder
		_ = os.MkdirAll(dir, 0o755)
	}
	hb, made := getenv(HeartbeatFileVar), false
	if hb == "" {
		if f, err := os.CreateTemp("", "gorun-heartbeat-"); err == nil {
			f.Close()
			hb, made = f.Name(), true
			cmd.Env = append(cmd.Env, HeartbeatFileVar+"="+hb)
		}
	}
	code := w.run(cmd, getenv, hb, func() {
		if made {
			os.Remove(hb)
		}
	})
	return code
}

// worker is one worker's supervisor.
type worker struct {
	localRank, rank int
	stderr          io.Writer

	conn   net.Conn   // relay socket; nil without an agent
	wmu    sync.Mutex // one frame at a time on conn
	connOK bool

	stopped  chan struct{} // closed when a stop signal arrived or a dump killed the worker
	stopOnce sync.Once

	ras     bool   // this worker speaks to NCCL's RAS for the job (rasReporter)
	rasAddr string // NCCL_RAS_ADDR; "" for NCCL's default
}

func (w *worker) send(kind byte, payload []byte) {
	if w.conn == nil {
		return
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if !w.connOK {
		return
	}
	if _, err := w.conn.Write(sshexec.AppendFrame(nil, kind, payload)); err != nil {
		w.connOK = false // the agent is gone; the worker goes on
	}
}

func (w *worker) markStopped() { w.stopOnce.Do(func() { close(w.stopped) }) }

func (w *worker) isStopped() bool {
	select {
	case <-w.stopped:
		return true
	default:
		return false
	}
}

// run starts the worker, supervises it and ends this process the way the
// worker ended.
func (w *worker) run(cmd *exec.Cmd, getenv func(string) string, heartbeat string, cleanup func()) int {
	cleanup = sync.OnceFunc(cleanup)
	defer cleanup()
	w.stopped = make(chan struct{})
	w.connOK = w.conn != nil
	echo := getenv(envplan.WorkerEchoVar) == "1"
	var copies sync.WaitGroup
	announced, failed := make(chan struct{}), make(chan struct{})
	defer func() {
		select {
		case <-announced:
		default:
			close(failed) // the worker never ran: the readers just end
		}
	}()
	var writeEnds, readEnds []*os.File
	closeWriteEnds := func() {
		for _, f := range writeEnds {
			f.Close()
		}
		writeEnds = nil
	}
	defer closeWriteEnds()
	if w.conn != nil {
		for _, s := range []struct {
			kind byte
			own  io.Writer
			set  *io.Writer
		}{{frameOut, os.Stdout, &cmd.Stdout}, {frameErr, os.Stderr, &cmd.Stderr}} {
			pr, pw, err := os.Pipe()
			if err != nil {
				fmt.Fprintf(w.stderr, "gorun %s: %v\n", envplan.RankCommand, err)
				return 127
			}
			*s.set = pw
			writeEnds = append(writeEnds, pw)
			readEnds = append(readEnds, pr)
			var own io.Writer
			if echo {
				own = s.own
			}
			copies.Add(1)
			go func() {
				defer copies.Done()
				defer pr.Close()
				select {
				case <-announced: // no line may reach the head before the start
				case <-failed:
					return
				}
				w.forward(s.kind, pr, own)
			}()
		}
	} else {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals()...)

	cpus, err := rankCPUs(getenv(envplan.RankCPUsVar), getenv("LOCAL_RANK"))
	if err != nil {
		fmt.Fprintf(w.stderr, "gorun %s: %v\n", envplan.RankCommand, err)
		return 127
	}
	// Affinity belongs to a thread: the worker is forked from this locked
	// thread and starts with its mask. The thread stays locked, and this
	// goroutine alive, until the worker is gone, because the worker's
	// parent-death signal is tied to it.
	runtime.LockOSThread()
	if len(cpus) > 0 {
		var set unix.CPUSet
		for _, c := range cpus {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			fmt.Fprintf(w.stderr, "gorun %s: bind local rank %d to CPUs %s: %v\n", envplan.RankCommand, w.localRank, cpuset.Format(cpus), err)
			return 127
		}
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(w.stderr, "gorun %s: start %s: %v\n", envplan.RankCommand, cmd.Path, err)
		return 127
	}
	pid := cmd.Process.Pid
	// Our copies of the write ends go now, so the readers end with the
	// worker's last writer.
	closeWriteEnds()
	w.ras = rasReporter(getenv)
	w.rasAddr = getenv("NCCL_RAS_ADDR")
	w.send(frameStarted, jsonFrame(workerStarted{Rank: w.rank, LocalRank: w.localRank,
		WorldSize: atoi(getenv("WORLD_SIZE"), -1), PID: pid, Time: time.Now().UnixNano(), RASReporter: w.ras}))
	close(announced)

	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	if w.ras {
		bg.Add(1)
		go func() { defer bg.Done(); w.watchRAS(ctx) }()
	}
	bg.Add(3)
	go func() { defer bg.Done(); w.forwardSignals(ctx, sigs, pid) }()
	go func() { defer bg.Done(); w.watch(ctx, pid, heartbeat, atoi(getenv("MASTER_PORT"), 0)) }()
	go func() { defer bg.Done(); w.listen(ctx, pid) }()

	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	end := time.Now().UnixNano()
	cancel()
	// The worker's last lines go out before its exit. A process it left
	// behind may still hold its stdout; torchrun would not wait for that,
	// so neither does this, past a moment.
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputDrain):
		for _, f := range readEnds {
			f.Close()
		}
		<-drained
	}
	if ws.Signaled() && !w.isStopped() {
		// A signal sent to the whole tree may reach the worker a moment
		// before this process is told of its own copy.
		select {
		case <-w.stopped:
		case <-time.After(20 * time.Millisecond):
		}
	}
	ex := workerExit{Rank: w.rank, LocalRank: w.localRank, Code: ws.ExitStatus(), Stopped: w.isStopped(), Time: end}
	if ws.Signaled() {
		ex.Code, ex.Signal = -1, int(ws.Signal())
	}
	w.send(frameExit, jsonFrame(ex))
	if w.conn != nil {
		w.conn.Close() // ends listen
	}
	bg.Wait()
	signal.Stop(sigs)
	if ex.Signal != 0 {
		cleanup() // exitBySignal does not return
		exitBySignal(syscall.Signal(ex.Signal))
	}
	return ex.Code
}

// outputDrain is how long the supervisor waits, once the worker has
// exited, for the rest of its output.
const outputDrain = 2 * time.Second

// forwardedSignals are the signals passed on to the worker. SIGKILL cannot
// be caught; the worker's parent-death signal covers it.
func forwardedSignals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGWINCH, syscall.SIGCONT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGABRT, syscall.SIGXCPU}
}

// isStopSignal reports signals that mean "stop": the worker's end after one of
// them is a consequence.
func isStopSignal(s os.Signal) bool {
	switch s {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

func (w *worker) forwardSignals(ctx context.Context, sigs <-chan os.Signal, pid int) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			if isStopSignal(s) {
				w.markStopped()
			}
			// To the worker's process group, as torchrun's killpg would
			// reach it and the children it started without gorun.
			_ = unix.Kill(-pid, s.(syscall.Signal))
		}
	}
}

// forward reads one of the worker's streams and sends its complete lines
// as frames, at most one frame per read, so a chatty worker costs a few
// large writes rather than one per line. A partial line waits for its
// newline unless it grows past maxLine; the rest goes at the end.
func (w *worker) forward(kind byte, r io.Reader, echo io.Writer) {
	buf := make([]byte, 64<<10)
	var held []byte
	frame := rankFrame(nil, w.localRank)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if echo != nil {
				_, _ = echo.Write(buf[:n])
			}
			held = append(held, buf[:n]...)
			cut := bytes.LastIndexByte(held, '\n') + 1
			if len(held)-cut > maxLine {
				cut = len(held)
			}
			if cut > 0 {
				w.send(kind, append(frame[:4], held[:cut]...))
				held = held[:copy(held, held[cut:])]
			}
		}
		if err != nil {
			if len(held) > 0 {
				w.send(kind, append(frame[:4], held...))
			}
			return
		}
	}
}

// watch reports progress when the heartbeat file is touched, and once,
// that the worker joined the rendezvous store (it holds a connection to
// MASTER_PORT), which ends its start-up.
func (w *worker) watch(ctx context.Context, pid int, heartbeat string, storePort int) {
	joined := storePort <= 0
	every := pollEvery
	if !joined {
		every = pollJoining
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last time.Time
	if fi, err := os.Stat(heartbeat); err == nil {
		last = fi.ModTime()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !joined && connectedTo(pid, storePort) {
			joined = true
			w.send(frameInit, rankFrame(nil, w.localRank))
			t.Reset(pollEvery)
		}
		if heartbeat != "" {
			if fi, err := os.Stat(heartbeat); err == nil && fi.ModTime().After(last) {
				last = fi.ModTime()
				w.send(frameProgress, rankFrame(nil, w.localRank))
			}
		}
	}
}

// listen serves the head's requests that the agent passes on.
func (w *worker) listen(ctx context.Context, pid int) {
	if w.conn == nil {
		return
	}
	br := bufio.NewReader(w.conn)
	for {
		b, err := br.ReadByte()
		if err != nil {
			return
		}
		switch {
		case b == tellDump:
			w.dumpStacks(ctx, pid)
		case b == tellRAS && w.ras:
			w.reportRAS(ctx)
		}
	}
}

// dumpStacks prints the worker's Python stacks for every thread: with
// py-spy when it is on the PATH (the worker lives on), else through
// Python's faulthandler, armed by PYTHONFAULTHANDLER, on SIGABRT (the
// worker dies: a hung attempt is being stopped anyway).
func (w *worker) dumpStacks(ctx context.Context, pid int) {
	if spy, err := exec.LookPath("py-spy"); err == nil {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(dctx, spy, "dump", "--pid", strconv.Itoa(pid)).CombinedOutput()
		cancel()
		if err == nil {
			var b []byte
			for _, l := range strings.SplitAfter(string(out), "\n") {
				if l != "" {
					b = append(b, "py-spy: "...)
					b = append(b, l...)
				}
			}
			if len(b) > 0 && b[len(b)-1] != '\n' {
				b = append(b, '\n')
			}
			w.send(frameErr, append(rankFrame(nil, w.localRank), b...))
			w.send(frameDumped, rankFrame(nil, w.localRank))
			return
		}
	}
	w.markStopped()
	_ = unix.Kill(pid, syscall.SIGABRT)
}

// exitBySignal ends this process by sig, as the worker ended. The Go
// runtime's own handling would print a goroutine dump for SIGABRT, SIGQUIT
// and the faults, so the default action is restored with rt_sigaction
// itself. No core file: the worker's own is the one that matters.
func exitBySignal(sig syscall.Signal) {
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	signal.Reset(sig)
	var dfl sigaction // SIG_DFL, no flags, empty mask
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
	time.Sleep(100 * time.Millisecond) // the signal is being delivered
	os.Exit(128 + int(sig))
}

// sigaction is the kernel's struct sigaction on Linux (amd64 and arm64).
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// workerCommand builds the worker's command from _rank's arguments.
func workerCommand(args []string, getenv func(string) string) (*exec.Cmd, error) {
	noPython, module := false, false
	for len(args) > 0 && args[0] != "--" {
		switch args[0] {
		case "--no-python":
			noPython = true
		case "-m":
			module = true
		default:
			return nil, fmt.Errorf("unknown option %q (usage: %s [--no-python | -m] -- script args...)", args[0], envplan.RankCommand)
		}
		args = args[1:]
	}
	if len(args) > 0 {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("nothing to run (usage: %s [--no-python | -m] -- script args...)", envplan.RankCommand)
	}
	argv := args
	if !noPython {
		py := interpreter(getenv, os.Getppid())
		argv = []string{py, "-u"}
		if module {
			argv = append(argv, "-m")
		}
		argv = append(argv, args...)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: argv}
	// Its own process group, so a signal torchrun sends to this group
	// reaches the worker once, through forwardSignals; and the parent-death
	// signal for when this process is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// interpreter is the Python torchrun runs workers with: $PYTHON_EXEC, else
// torchrun's own sys.executable, which Python derives from its argv[0] (a
// virtualenv's bin/python stays that path; the /proc exe link would
// resolve it to the base interpreter and lose the virtualenv).
func interpreter(getenv func(string) string, parent int) string {
	if py := getenv("PYTHON_EXEC"); py != "" {
		return py
	}
	proc := filepath.Join("/proc", strconv.Itoa(parent))
	if b, err := os.ReadFile(filepath.Join(proc, "cmdline")); err == nil {
		argv0, _, _ := bytes.Cut(b, []byte{0})
		a := string(argv0)
		if isPython(a) {
			if strings.Contains(a, "/") && !filepath.IsAbs(a) {
				if cwd, err := os.Readlink(filepath.Join(proc, "cwd")); err == nil {
					a = filepath.Join(cwd, a)
				}
			}
			return a
		}
	}
	if exe, err := os.Readlink(filepath.Join(proc, "exe")); err == nil && isPython(exe) {
		return exe
	}
	return "python3"
}

func isPython(path string) bool {
	b := filepath.Base(path)
	return strings.HasPrefix(b, "python") || strings.HasPrefix(b, "pypy")
}

// workerEnv is the worker's environment: this process's, with torchrun's
// restart count replaced by the group's (gorun owns restarts) and Python's
// faulthandler armed, so a hang diagnosis can print every thread's stack.
// The user's own settings win.
func workerEnv(env []string, getenv func(string) string) []string {
	out := make([]string, 0, len(env)+2)
	count := getenv(RestartCountVar)
	haveFH := false
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		haveFH = haveFH || k == "PYTHONFAULTHANDLER"
		switch {
		case k == sshexec.RelaySocketVar:
			continue // the worker's own children must not speak for it
		case k == "TORCHELASTIC_RESTART_COUNT" && count != "":
			continue
		}
		out = append(out, kv)
	}
	if count != "" {
		out = append(out, "TORCHELASTIC_RESTART_COUNT="+count)
	}
	if !haveFH {
		out = append(out, "PYTHONFAULTHANDLER=1")
	}
	return out
}

// connectedTo reports whether process pid holds an established TCP
// connection to port (the rendezvous store, which a worker reaches in
// init_process_group).
func connectedTo(pid, port int) bool {
	inodes := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "01" { // 01: ESTABLISHED
				continue
			}
			_, hexPort, ok := strings.Cut(fs[2], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				inodes[fs[9]] = true
			}
		}
	}
	if len(inodes) == 0 {
		return false
	}
	fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(fds)
	if err != nil {
		return false
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(fds, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") && inodes[strings.TrimSuffix(l[len("socket:["):], "]")] {
			return true
		}
	}
	return false
}

func atoi(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// rankCPUs picks local rank's CPU set out of the ';'-separated lists; nil
// when no binding was planned.
func rankCPUs(lists, localRank string) ([]int, error) {
	if lists == "" {
		return nil, nil
	}
	r, err := strconv.Atoi(localRank)
	sets := strings.Split(lists, ";")
	if err != nil || r < 0 || r >= len(sets) {
		return nil, fmt.Errorf("LOCAL_RANK=%q does not index %s (%d sets)", localRank, envplan.RankCPUsVar, len(sets))
	}
	if sets[r] == "" {
		return nil, nil
	}
	return cpuset.Parse(sets[r])
}

// rasEvery is how often the RAS reporter asks NCCL how many collectives
// the job has run: a sign of progress that needs no output from the
// script. NCCL gathers the answer from every process, so not too often.
const rasEvery = 30 * time.Second

// rasReporter reports whether this worker asks NCCL's RAS for the job:
// one per job, local rank 0 of node 0 (NCCL's RAS reports on every
// process of the job from any of them), unless RAS is off.
func rasReporter(getenv func(string) string) bool {
	return getenv("LOCAL_RANK") == "0" && getenv("GROUP_RANK") == "0" && getenv("NCCL_RAS_ENABLE") != "0"
}

// watchRAS reports progress whenever the job's total of collectives has
// grown since the last look. Without NCCL (nobody listens) or with an NCCL
// too old for the JSON report (no exact counts) it says nothing.
func (w *worker) watchRAS(ctx context.Context) {
	t := time.NewTicker(rasEvery)
	defer t.Stop()
	var last uint64
	seen := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, rasEvery/2)
		text, err := QueryRASJSON(qctx, w.rasAddr)
		cancel()
		if err != nil {
			continue
		}
		total, exact := ParseRAS(text).TotalCollectives()
		if !exact {
			continue
		}
		if seen && total > last {
			w.send(frameProgress, rankFrame(nil, w.localRank))
		}
		last, seen = total, true
	}
}

// reportRAS prints NCCL's RAS report on the job, each line marked
// "nccl ras: ", then the ranks it finds lagging, and says when it is done.
func (w *worker) reportRAS(ctx context.Context) {
	defer w.send(frameRASDone, rankFrame(nil, w.localRank))
	qctx, cancel := context.WithTimeout(ctx, rasWait-2*time.Second)
	text, err := QueryRAS(qctx, w.rasAddr, true)
	cancel()
	var b []byte
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if l != "" {
			b = append(append(append(b, "nccl ras: "...), l...), '\n')
		}
	}
	switch rep := ParseRAS(text); {
	case errors.Is(err, syscall.ECONNREFUSED):
		return // no NCCL in this job: nothing to say
	case err != nil && text == "":
		b = fmt.Appendf(b, "nccl ras: no report (%v)\n", err)
	case len(rep.Lagging()) > 0:
		b = fmt.Appendf(b, "nccl ras: ranks behind the others (did not join a collective, or no answer): %s\n", strings.Trim(fmt.Sprint(rep.Lagging()), "[]"))
	default:
		b = append(b, "nccl ras: no rank lags in its collective count\n"...)
	}
	w.send(frameErr, append(rankFrame(nil, w.localRank), b...))
}
