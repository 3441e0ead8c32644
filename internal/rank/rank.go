package rank

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/cpuset"
	"github.com/gorun/gorun/internal/logdir"
	"github.com/gorun/gorun/internal/stepscan"
	"github.com/gorun/gorun/internal/term"
	"github.com/gorun/gorun/internal/wire"
)

// Run is `gorun _rank [--no-python | -m] -- script args...`, which
// torchrun starts in place of each worker. It stays the worker's parent:
//
//   - it starts the interpreter torchrun itself runs under (torchrun's
//     sys.executable: $PYTHON_EXEC, else the argv[0] of its parent, which
//     keeps a virtualenv's path), as `<python> -u [-m] script args`, bound
//     to the local rank's CPUs from wire.RankCPUsVar;
//   - it forwards every signal it gets to the worker;
//   - it reports to the node agent over the relay socket: started, every
//     output line, progress, the exit; and prints the worker's stacks when
//     the head asks;
//   - it exits exactly as the worker did, with its code or by its signal,
//     so torchrun sees what it would have seen without gorun.
//
// Without a relay socket (not started by gorun's agent) the worker's output
// goes straight to this process's stdout and stderr. Run returns the
// worker's exit code, or 127 when the worker could not start; a worker
// killed by a signal ends this process by the same signal, and then Run
// does not return.
func Run(args []string, getenv func(string) string, stderr io.Writer) int {
	cmd, take, err := workerCommand(args, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "gorun %s: %v\n", wire.RankCommand, err)
		return 127
	}
	w := &worker{localRank: atoi(getenv("LOCAL_RANK"), -1), rank: atoi(getenv("RANK"), -1), stderr: stderr}
	if sock := getenv(wire.PoolSocketVar); sock != "" && take != nil {
		w.pool, w.take = sock, take
	}
	cmd.Env = workerEnv(os.Environ(), getenv)
	if sock := getenv(wire.RelaySocketVar); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			w.conn, w.sock = c, sock
		} else {
			fmt.Fprintf(stderr, "gorun %s: cannot reach the node agent (%v); output goes to torchrun\n", wire.RankCommand, err)
		}
	}
	if dir := getenv(wire.FlightRecorderDirVar); dir != "" {
		// torch writes its flight-recorder dump there but makes no folder
		_ = os.MkdirAll(dir, 0o755)
	}
	var made []string
	touched := func(name, prefix string) string {
		if f := getenv(name); f != "" {
			return f
		}
		// In the agent's directory, which goes with the agent however
		// this process ends.
		dir := ""
		if w.sock != "" {
			dir = filepath.Dir(w.sock)
		}
		f, err := os.CreateTemp(dir, prefix)
		if err != nil {
			return ""
		}
		f.Close()
		made = append(made, f.Name())
		cmd.Env = append(cmd.Env, name+"="+f.Name())
		return f.Name()
	}
	files := watched{heartbeat: touched(wire.HeartbeatFileVar, "gorun-heartbeat-"), checkpoint: touched(wire.CheckpointFileVar, "gorun-checkpoint-")}
	code := w.run(cmd, getenv, files, func() {
		for _, f := range made {
			os.Remove(f)
		}
	})
	return code
}

// watched are the files a worker touches to say something: it made
// progress ($GORUN_HEARTBEAT_FILE), it saved a checkpoint
// ($GORUN_CHECKPOINT_FILE). "": none.
type watched struct{ heartbeat, checkpoint string }

// worker is one worker's supervisor.
type worker struct {
	localRank, rank int
	stderr          io.Writer

	conn   net.Conn   // relay socket; nil without an agent
	sock   string     // its path
	wmu    sync.Mutex // one frame at a time on conn
	connOK bool

	stopped  chan struct{} // closed when a stop signal arrived or a dump killed the worker
	stopOnce sync.Once
	gate     *signalGate // how each signal reaches the worker once

	dump stackCapture // the worker's stderr while faulthandler dumps (stacks.go)

	steps *stepscan.Scanner // reads the worker's output for its training steps (wire.StepsVar); nil: none

	ras     bool   // this worker speaks to NCCL's RAS for the job (rasReporter)
	rasAddr string // NCCL_RAS_ADDR; "" for NCCL's default

	pool string         // the node's worker pool (wire.PoolSocketVar); "": none
	take *wire.PoolTake // the worker, for the pool

	ptys []*os.File // the master ends of the worker's pseudo-terminals, resized with the head's terminal
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
	if _, err := w.conn.Write(wire.AppendFrame(nil, kind, payload)); err != nil {
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
func (w *worker) run(cmd *exec.Cmd, getenv func(string) string, files watched, cleanup func()) int {
	cleanup = sync.OnceFunc(cleanup)
	defer cleanup()
	w.stopped = make(chan struct{})
	w.connOK = w.conn != nil
	localRank := atoi(getenv("LOCAL_RANK"), -1)
	if sock := getenv(wire.RelaySocketVar); localRank == 0 && sock != "" {
		// The attempt's --log-dir folder, seen in the run's as torchrun's
		// own restarts would write it.
		host, _ := os.Hostname()
		if err := logdir.Begin(getenv("TORCHELASTIC_ERROR_FILE"), getenv(wire.LogDirVar), getenv(wire.RunIDVar), host,
			atoi(getenv(wire.RestartCountVar), 0), filepath.Dir(sock)); err != nil {
			fmt.Fprintf(w.stderr, "gorun %s: --log-dir: this attempt's folder stays where torchrun made it: %v\n", wire.RankCommand, err)
		}
	}
	if w.conn != nil {
		w.steps = w.stepScanner(getenv(wire.StepsVar))
	}
	echo := wire.StdStreams(getenv(wire.WorkerEchoVar), localRank)
	merged := getenv(wire.MergedOutputVar) == "1" && echo == 0
	// Streams torchrun would show on no console (--redirects): written
	// to its files (echo), never sent to the head as lines.
	quiet := wire.StdStreams(getenv(wire.WorkerQuietVar), localRank)
	var copies sync.WaitGroup
	announced, failed := make(chan struct{}), make(chan struct{})
	defer func() {
		select {
		case <-announced:
		default:
			close(failed) // the worker never ran: the readers just end
		}
	}()
	if w.localRank == 0 {
		// The job's stdin (gorun's own in local mode, /dev/null over ssh),
		// to one worker only: several reading one stream would take
		// each other's lines. The others read /dev/null.
		cmd.Stdin = os.Stdin
	}
	var writeEnds, readEnds []*os.File
	closeWriteEnds := func() {
		for _, f := range writeEnds {
			f.Close()
		}
		writeEnds = nil
	}
	defer closeWriteEnds()
	if w.conn != nil {
		type stream struct {
			kind    byte
			own     io.Writer
			set     []*io.Writer
			capture bool // carries stderr: faulthandler's dump
			tty     bool // a pseudo-terminal, not a pipe (wire.TTYVar)
			bit     int  // 1 stdout, 2 stderr, 3 both (merged), as --redirects counts them
		}
		tty := wire.ParseTTY(getenv(wire.TTYVar))
		streams := []stream{{wire.FrameOut, os.Stdout, []*io.Writer{&cmd.Stdout}, false, tty.Out, 1},
			{wire.FrameErr, os.Stderr, []*io.Writer{&cmd.Stderr}, true, tty.Err, 2}}
		if merged {
			streams = []stream{{wire.FrameOut, os.Stdout, []*io.Writer{&cmd.Stdout, &cmd.Stderr}, true, tty.Out && tty.Err, 3}}
		}
		for _, s := range streams {
			pr, pw, err := openStream(s.tty, tty.Cols, tty.Rows)
			if err != nil {
				fmt.Fprintf(w.stderr, "gorun %s: %v\n", wire.RankCommand, err)
				return 127
			}
			for _, set := range s.set {
				*set = pw
			}
			writeEnds = append(writeEnds, pw)
			readEnds = append(readEnds, pr)
			if s.tty {
				w.ptys = append(w.ptys, pr)
			}
			var own io.Writer
			if echo&s.bit == s.bit {
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
				w.forward(s.kind, pr, own, s.capture, quiet&s.bit == s.bit)
			}()
		}
	} else {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals()...)
	// Caught (and dropped), not ignored, so the worker gets the default
	// back: a write to a stderr whose reader died (the agent's) must not
	// kill this process before it has cleaned up.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	if w.conn != nil && getenv(wire.GateVar) == "1" {
		if sig := w.awaitGate(sigs); sig != 0 {
			// Stopped before its release: the worker never runs, and this
			// process ends by the stop's signal, as a worker stopped in
			// the pool's wait does (start).
			cleanup()
			exitBySignal(sig)
		}
	}
	cpus, err := rankCPUs(getenv(wire.RankCPUsVar), getenv("LOCAL_RANK"))
	if err != nil {
		fmt.Fprintf(w.stderr, "gorun %s: %v\n", wire.RankCommand, err)
		return 127
	}
	// The worker is forked from this locked thread and starts with its
	// mask. The thread stays locked, and this goroutine alive, until the
	// worker is gone, because the worker's parent-death signal is tied to it.
	if err := bindThread(cpus); err != nil {
		fmt.Fprintf(w.stderr, "gorun %s: bind local rank %d to CPUs %s: %v\n", wire.RankCommand, w.localRank, cpuset.Format(cpus), err)
		return 127
	}
	pid, wait, started, err := w.start(cmd, cpus, sigs)
	if stop := (*StoppedError)(nil); errors.As(err, &stop) {
		// The stop came before the worker started: it never runs (a
		// stop's SIGINT in its import of torch may be lost), and this
		// process ends as the worker would have, by the stop's signal.
		cleanup()
		exitBySignal(stop.Signal)
	}
	if err != nil {
		fmt.Fprintf(w.stderr, "gorun %s: start %s: %v\n", wire.RankCommand, cmd.Path, err)
		return 127
	}
	w.gate = newSignalGate(func(sig syscall.Signal) { _ = unix.Kill(-pid, sig) }, w.markStopped)
	// Our copies of the write ends go now, so the readers end with the
	// worker's last writer.
	closeWriteEnds()
	w.ras = rasReporter(getenv)
	w.rasAddr = getenv("NCCL_RAS_ADDR")
	started.Rank, started.LocalRank, started.WorldSize = w.rank, w.localRank, atoi(getenv("WORLD_SIZE"), -1)
	started.PID, started.Time, started.RASReporter = pid, time.Now().UnixNano(), w.ras
	started.Host, _ = os.Hostname()
	started.Supervisor = os.Getpid()
	w.send(wire.FrameStarted, wire.JSON(started))
	close(announced)

	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	if w.ras {
		bg.Add(1)
		go func() { defer bg.Done(); w.watchRAS(ctx, rasEvery) }()
	}
	bg.Add(2)
	go func() { defer bg.Done(); w.forwardSignals(ctx, sigs, pid) }()
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); w.watch(ctx, pid, files, atoi(getenv("MASTER_PORT"), 0)) }()
	go func() { defer bg.Done(); w.listen(ctx, pid) }()

	ws := wait()
	end := time.Now().UnixNano()
	cancel()
	<-watchDone // its last look (a checkpoint touched just before the end) goes before the exit
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
	w.steps.Close() // a step still pending goes before the exit
	if ws.Signaled() && !w.isStopped() {
		// A signal sent to the whole tree may reach the worker a moment
		// before this process is told of its own copy.
		select {
		case <-w.stopped:
		case <-time.After(20 * time.Millisecond):
		}
	}
	w.sendCaptured() // the stacks first: the head counts the dump done at the exit
	ex := wire.WorkerExit{Rank: w.rank, LocalRank: w.localRank, Code: ws.ExitStatus(), Stopped: w.isStopped(), Time: end}
	if ws.Signaled() {
		ex.Code, ex.Signal = -1, int(ws.Signal())
	}
	w.send(wire.FrameExit, wire.JSON(ex))
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

// openStream is one of the worker's output streams: a pipe, or where the
// head's own stream is a terminal, a pseudo-terminal of its size, so the
// worker's isatty() and terminal size are torchrun's. r is where its
// output is read, w the worker's end.
func openStream(tty bool, cols, rows int) (r, w *os.File, err error) {
	if tty {
		w, r, err := term.OpenPTY(cols, rows)
		return r, w, err
	}
	return os.Pipe()
}

// start starts the worker: in its interpreter from the node's pool when
// the pool has one that fits, else as cmd, a child of this process. It
// returns the worker's pid and how to wait for its end, and the start
// frame as far as it says how the worker started. sigs are the signals
// this process caught for the worker: they reach it once it runs (sigs
// has them again, in order). A stop, coming while the pool is still
// importing (one of sigs, or the agent's word through the pool), means
// the worker does not start: a *StoppedError.
func (w *worker) start(cmd *exec.Cmd, cpus []int, sigs chan os.Signal) (int, func() unix.WaitStatus, wire.WorkerStarted, error) {
	var st wire.WorkerStarted
	if w.take != nil {
		var held []os.Signal
		var stopSig syscall.Signal
		abandon, done := make(chan struct{}), make(chan struct{})
		var watch sync.WaitGroup
		watch.Go(func() {
			for {
				select {
				case s := <-sigs:
					held = append(held, s)
					if isStopSignal(s) {
						stopSig = s.(syscall.Signal)
						close(abandon)
						return
					}
				case <-done:
					return
				}
			}
		})
		p, cold, err := w.takePooled(cmd, cpus, abandon)
		close(done)
		watch.Wait()
		for _, s := range held {
			select {
			case sigs <- s: // for forwardSignals, once the worker runs
			default: // full: that many come no faster than they are sent
			}
		}
		var stopped *StoppedError
		switch {
		case errors.Is(err, ErrTakeAbandoned):
			return 0, nil, st, &StoppedError{Signal: stopSig}
		case errors.As(err, &stopped):
			return 0, nil, st, err
		case err != nil:
			st.Cold = "the pool could not be asked: " + err.Error()
		case cold != "":
			st.Cold = cold
		default:
			st.Pooled = true
			return p.PID, p.Wait, st, nil
		}
	}
	if err := cmd.Start(); err != nil {
		return 0, nil, st, err
	}
	pid := cmd.Process.Pid
	return pid, func() unix.WaitStatus {
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				return ws
			}
		}
	}, st, nil
}

// takePooled asks the pool for the worker's interpreter, handing it the
// streams cmd would have had.
func (w *worker) takePooled(cmd *exec.Cmd, cpus []int, abandon <-chan struct{}) (*Pooled, string, error) {
	out, ok1 := cmd.Stdout.(*os.File)
	errf, ok2 := cmd.Stderr.(*os.File)
	if !ok1 || !ok2 {
		return nil, "", fmt.Errorf("the worker's streams are not files")
	}
	in, ok := cmd.Stdin.(*os.File) // local rank 0's: the job's stdin (run)
	if !ok {
		devnull, err := os.Open(os.DevNull) // as exec.Cmd gives a worker without Stdin
		if err != nil {
			return nil, "", err
		}
		defer devnull.Close()
		in = devnull
	}
	dir, err := os.Getwd()
	if err != nil {
		return nil, "", err
	}
	take := *w.take
	take.Slot, take.Env, take.Dir, take.CPUs = w.localRank, cmd.Env, dir, cpus
	return TakePooled(w.pool, take, in, out, errf, abandon)
}

// outputDrain is how long the supervisor waits, once the worker has
// exited, for the rest of its output.
const outputDrain = 2 * time.Second

// listen serves the head's requests that the agent passes on.
func (w *worker) listen(ctx context.Context, pid int) {
	if w.conn == nil {
		return
	}
	br := bufio.NewReader(w.conn)
	for {
		b, err := br.ReadByte()
		if err != nil {
			if ctx.Err() == nil {
				w.agentGone(pid)
			}
			return
		}
		switch b {
		case wire.TellDump:
			w.dumpStacks(ctx, pid)
		case wire.TellRAS:
			if w.ras {
				w.reportRAS(ctx)
			}
		case wire.TellResize:
			size, err := br.ReadString(';')
			if err != nil {
				continue // the next read ends the loop
			}
			if cols, rows, ok := wire.ParseSize(strings.TrimSuffix(size, ";")); ok {
				for _, m := range w.ptys {
					_ = term.SetSize(m, cols, rows)
				}
				if len(w.ptys) > 0 {
					_ = unix.Kill(-pid, syscall.SIGWINCH) // as a terminal tells its foreground
				}
			}
		case wire.RelayStop, wire.RelaySignal, wire.RelayHad:
			n, err := br.ReadByte()
			if err != nil {
				continue // the next read ends the loop
			}
			how := heardAsk
			if b == wire.RelayHad {
				how = heardHad
			}
			w.gate.hear(syscall.Signal(n), how)
		}
	}
}

// agentGone ends the worker when the node agent died while it ran (the
// socket to it closed; the agent keeps it until the last process of the
// job is gone): nothing of a job may outlive its agent. The agent's
// directory, with the socket and the touched files, goes too.
func (w *worker) agentGone(pid int) {
	// First: once the worker is dead, this process ends at once.
	if dir := filepath.Dir(w.sock); strings.HasPrefix(filepath.Base(dir), wire.RelayDirPrefix) {
		_ = os.RemoveAll(dir)
	}
	w.markStopped()
	_ = unix.Kill(-pid, syscall.SIGKILL)
	_ = unix.Kill(pid, syscall.SIGKILL)
	// Likely to nobody: stderr went to the agent.
	fmt.Fprintf(w.stderr, "gorun %s: the node agent is gone; killed local rank %d's worker\n", wire.RankCommand, w.localRank)
}

func atoi(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}
