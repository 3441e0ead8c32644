package sshexec

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/logdir"
	"github.com/gorun/gorun/internal/wire"

	"golang.org/x/sys/unix"
)

// Exit codes of the agent itself, when the job never ran.
const (
	// AgentExitBadSpec: the job line was missing, unreadable or invalid.
	AgentExitBadSpec = 125
	// AgentExitNoStart: the job could not be started (exec failed).
	AgentExitNoStart = 127
)

// maxJobLine bounds the job line so a confused head cannot exhaust memory.
const maxJobLine = 16 << 20

// quickPoll is how often a quick stop looks whether the job's main
// process is the last one left.
const quickPoll = 20 * time.Millisecond

// killRepeat is how often the agent re-scans /proc and SIGKILLs what is
// left once it has escalated, until the last descendant is reaped.
const killRepeat = 50 * time.Millisecond

// ServeAgent runs the node agent, `gorun _agent`, and returns its exit code.
//
// It reads one JSON line (a Job) from stdin, starts the job in a new session
// with stdin /dev/null and stdout/stderr on its own stdout/stderr, and then
// reads control bytes from stdin: 'h' heartbeat, 't' graceful stop, 'k'
// kill now, 'r' and a byte to pass to the relay clients (Job.Relay). EOF
// on stdin, a missed heartbeat (Job.Heartbeat), SIGTERM, SIGINT, SIGHUP or
// ctx being cancelled stop the job gracefully: SIGTERM to
// every descendant, Job.Grace, then SIGKILL until none is left. The agent is
// a child subreaper, so workers that their parent left behind (torchrun's
// workers run in sessions of their own) are reparented to it and are killed
// too. When the job's main process exits by itself, leftovers are stopped
// the same way. The agent reaps every child and returns only when its whole
// tree is gone. The job starts with default signal dispositions and an
// empty signal mask, whatever the agent's own were.
//
// The result is the job's exit code, or 128+signal if it died by a signal,
// also after a stop (the head knows it asked). AgentExitNoStart (127) means
// the job could not start, AgentExitBadSpec (125) that the job line was
// bad. Nothing but the job's output goes to stdout; the agent's own messages
// go to stderr prefixed "gorun agent: ".
func ServeAgent(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	return ServeAgentWith(ctx, nil, stdin, stdout, stderr)
}

// Sidecar runs inside the agent beside a relayed job that carries
// Job.Sidecar settings, from the job's start until its main process exits
// or the agent stops it (ctx ends then). Each payload it passes to send
// goes to the head as one wire.FrameTelemetry frame, whole, between the job's
// own frames; send is safe for concurrent use and drops what it is given
// once the head is gone. A Sidecar must not block after ctx ends: the
// agent waits sidecarWait for it, then returns without it.
type Sidecar func(ctx context.Context, settings json.RawMessage, send func(payload []byte))

// sidecarWait bounds how long the agent waits for its sidecar to return
// once the job is over. It is short: a restart waits for the agent's
// exit, and an NVML sample in flight (hundreds of milliseconds on a
// loaded GPU node) is worth less than that; the agent's exit ends it.
const sidecarWait = 100 * time.Millisecond

// ServeAgentWith is ServeAgent with a sidecar (nil: none). gorun's sidecar
// samples the job's GPUs; it runs in the agent, not in the job, so a
// failing or slow NVML call never reaches a worker.
func ServeAgentWith(ctx context.Context, sidecar Sidecar, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &agent{stderr: stderr, self: os.Getpid()}
	// The job's parent-death signal is tied to the thread that forks it:
	// this one, kept until the agent is done.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// Caught, not ignored, so that the job gets default dispositions back
	// on exec. SIGPIPE is caught so that a write to a closed stderr (the
	// head is gone) cannot kill the agent before it has cleaned up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, wire.StopSignals()...)
	signal.Notify(sigs, syscall.SIGPIPE)
	defer signal.Stop(sigs)

	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		a.logf("become child subreaper: %v", err)
		return AgentExitBadSpec
	}

	done := make(chan struct{})
	defer close(done)
	jobc := make(chan jobOrErr, 2)
	ctl := make(chan control, 16)
	go readControl(stdin, jobc, ctl, done)

	var job Job
	specTimer := time.NewTimer(DefaultHeartbeatTimeout)
	select {
	case r := <-jobc:
		specTimer.Stop()
		if r.err != nil {
			a.logf("read job: %v", r.err)
			return AgentExitBadSpec
		}
		job = r.job
	case <-specTimer.C:
		a.logf("read job: nothing received for %v", DefaultHeartbeatTimeout)
		return AgentExitBadSpec
	case <-ctx.Done():
		specTimer.Stop()
		return AgentExitBadSpec
	}
	if job.Protocol != wire.Protocol {
		a.logf("%s", wire.ProtocolMismatch(job.Protocol, wire.Protocol))
		return AgentExitBadSpec
	}
	if len(job.Argv) == 0 || job.Argv[0] == "" {
		a.logf("read job: empty argv")
		return AgentExitBadSpec
	}
	selfArg(job.Argv)
	if job.HasStdin {
		job.Stdin = os.NewFile(JobStdinFD, "job stdin")
		defer job.Stdin.Close()
	}
	// The signals the head passes on: one sent to every process of the
	// job at once must kill neither the agent nor torchrun, which inherits
	// the disposition; the workers' supervisors catch them again.
	for _, n := range job.PassSignals {
		signal.Ignore(syscall.Signal(n))
	}

	jobOut, jobErr := stdout, stderr
	if job.Relay {
		rl, err := startRelay(stdout, job.RelayEnd)
		if err != nil {
			a.logf("%v", err)
			return AgentExitNoStart
		}
		defer rl.close()
		a.relay = rl
		if job.Env == nil {
			job.Env = map[string]string{}
		}
		job.Env[wire.RelaySocketVar] = rl.path()
		if job.Pool != nil {
			job.Env[wire.PoolSocketVar] = rl.poolPath()
		}
		jobOut = frameWriter{rl, wire.FrameStdout}
		jobErr = frameWriter{rl, wire.FrameStderr}
	}
	var out *startedJob
	var r *reaper
	if job.Standby {
		var code int
		if job, out, r, code = a.standBy(ctx, job, jobOut, jobErr, jobc, ctl, sigs); r == nil {
			return code
		}
	} else {
		var err error
		if out, err = a.startJob(job, jobOut, jobErr); err != nil {
			a.logf("start %s: %v", job.Argv[0], err)
			return AgentExitNoStart
		}
		r = a.newReaper(out.pid)
		go r.run()
	}
	defer a.pool.close() // before the relay's folder goes
	if sidecar != nil && a.relay != nil && len(job.Sidecar) > 0 {
		defer a.runSidecar(ctx, sidecar, job.Sidecar, r.mainDone, a.relay.releasedC())()
	}
	code := a.supervise(ctx, job, r, ctl, sigs)
	out.wait()
	if a.relay != nil {
		// torchrun has ended: its --log-dir folder joins the run's.
		if err := logdir.Finish(a.relay.dir); err != nil {
			a.logf("--log-dir: this attempt's folder stays where torchrun made it: %v", err)
		}
	}
	return code
}

// runSidecar starts the sidecar, once released is closed for a job
// handed ahead (nil: at once; a gated job may wait through a whole
// attempt, whose telemetry is not its own), and returns the function that
// ends it: its context ends when the job's main process is gone (or ctx
// ends), and the returned function waits for it, at most sidecarWait.
func (a *agent) runSidecar(ctx context.Context, sidecar Sidecar, settings json.RawMessage, mainDone, released <-chan struct{}) func() {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-mainDone:
			cancel()
		case <-sctx.Done():
		}
	}()
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				a.logf("sidecar: %v", p) // the job is worth more than its telemetry
			}
		}()
		if released != nil {
			select {
			case <-released:
			case <-sctx.Done():
				return
			}
		}
		sidecar(sctx, settings, func(payload []byte) {
			if len(payload) <= wire.MaxFrame {
				a.relay.write(wire.AppendFrame(nil, wire.FrameTelemetry, payload))
			}
		})
	}()
	return func() {
		cancel()
		t := time.NewTimer(sidecarWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C: // abandoned: it ends with the agent
		}
	}
}

// frameWriter frames what the job's main process writes to one stream.
type frameWriter struct {
	r    *relay
	kind byte
}

func (w frameWriter) Write(p []byte) (int, error) {
	written := len(p)
	for len(p) > 0 {
		n := min(len(p), wire.MaxFrame)
		w.r.write(wire.AppendFrame(nil, w.kind, p[:n]))
		p = p[n:]
	}
	return written, nil
}

// agent holds what the supervision loop shares.
type agent struct {
	stderr io.Writer
	self   int
	relay  *relay // nil unless Job.Relay
	pool   *pool  // nil unless Job.Pool, and once dropped
	asks   asks   // children run for the head's asks (standbyask.go)
	// released: the head released the job handed ahead (wire.CtlRelease)
	// before the agent on standby had taken the job; supervise releases
	// it as it begins.
	released bool
}

// release releases a job handed ahead (Job.Gated): its workers'
// supervisors start their workers. The agent's stream says so first.
func (a *agent) release() {
	said := startFrame(wire.StartInfo{Released: true, Time: time.Now().UnixNano()})
	if a.relay != nil && a.relay.open(said) {
		a.asks.endAhead() // the restart's asks are over
	}
}

// startJob starts the job's main process and its worker pool, when it
// asks for one: the main process as the pool's fork server where the two
// can share their imports (startPoolWithMain), else side by side.
func (a *agent) startJob(job Job, stdout, stderr io.Writer) (*startedJob, error) {
	if job.Pool != nil && a.relay != nil {
		if ms, _ := startPoolWithMain(job, a.relay.dir, nil, stdout, stderr, a.logf); ms != nil {
			a.pool = ms.pool
			return ms.out, nil
		}
	}
	out, err := startJob(job, stdout, stderr)
	if err == nil {
		a.startPool(job)
	}
	return out, err
}

// startPool starts the job's worker pool, when it asks for one; without
// it the workers start as ever.
func (a *agent) startPool(job Job) {
	if job.Pool == nil || a.relay == nil {
		return
	}
	p, err := startPool(job, a.relay.dir, a.logf)
	if err != nil {
		// Each worker's supervisor asks anyway (the job has the socket's
		// name already): it is told why, and the node says so once.
		if p = noPool(a.relay.poolPath(), "the node's pool did not start: "+err.Error(), a.logf); p == nil {
			a.logf("pool: %v; the workers start without it", err)
			return
		}
	}
	a.pool = p
}

// dropPool kills the pool's interpreters and forgets it.
func (a *agent) dropPool() {
	a.pool.close()
	a.pool = nil
}

// newReaper is a reaper of the agent's children that tells the asks and
// the pool of their children's ends.
func (a *agent) newReaper(main int) *reaper {
	r := newReaper(main)
	pool := a.pool
	r.others = func(pid int, ws unix.WaitStatus) {
		if !a.asks.reaped(pid, ws) && pool != nil {
			pool.reaped(pid, ws)
		}
	}
	return r
}

func (a *agent) logf(format string, args ...any) {
	// Errors are ignored: stderr may be a pipe to a head that is gone.
	_, _ = fmt.Fprintf(a.stderr, "gorun agent: "+format+"\n", args...)
}

// control is one message the head sent after the job line.
type control struct {
	b     byte           // wire.CtlTerm, wire.CtlInterrupt, wire.CtlKill, wire.CtlHeartbeat, wire.CtlTell, wire.CtlSignal, wire.CtlAsk
	arg   byte           // wire.CtlTell's byte
	line  []byte         // wire.CtlAsk's request
	sig   syscall.Signal // wire.CtlTerm's, wire.CtlInterrupt's (0: SIGTERM) or wire.CtlSignal's signal
	grace time.Duration  // wire.CtlTerm's grace (0: Job.Grace)
}

// supervise runs until every descendant is reaped and returns the job's
// exit code.
//
// A stop of a relayed job (torchrun's) freezes its main process first
// (SIGSTOP), so torchrun neither reacts to its workers' ends nor prints a
// shutdown of its own, and tells every relay client (a worker's
// supervisor) to give its worker the stop's signal, once. Once no client
// is left, whatever else is left gets the signal too, and the main process
// is killed as soon as it is alone; what is still there after the grace is
// killed. Other jobs get the signal on every process, then the grace.
func (a *agent) supervise(ctx context.Context, job Job, r *reaper, ctl <-chan control, sigs <-chan os.Signal) int {
	heartbeat := job.Heartbeat
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeatTimeout
	}
	shortGrace := job.Grace
	if shortGrace <= 0 {
		shortGrace = DefaultGrace
	}
	outsideGrace := job.StopGrace
	if outsideGrace <= 0 {
		outsideGrace = shortGrace
	}

	hb := time.NewTimer(heartbeat)
	defer hb.Stop()
	var (
		stopping, killing bool
		stopSig           syscall.Signal
		stopGrace         time.Duration
		leftSignalled     bool // the rest of the tree had the stop's signal
		graceC            <-chan time.Time
		killC             <-chan time.Time
		pollC             <-chan time.Time
		hungUp            <-chan struct{}
		lookNow           bool // a quick stop looks at once whether torchrun is alone
		mainDone          = r.mainDone
		mainGone          bool
		ctxDone           = ctx.Done()
		graceTimer        *time.Timer
		killTicker        *time.Ticker
		pollTicker        *time.Ticker
	)
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
		if killTicker != nil {
			killTicker.Stop()
		}
		if pollTicker != nil {
			pollTicker.Stop()
		}
	}()
	// signalLeft gives the stop's signal to every live process of the
	// tree but the main one, once each.
	signalLeft := func() int {
		leftSignalled = true
		n, err := signalProcs(a.self, r.main, stopSig)
		if err != nil {
			a.logf("stop: %v", err)
		}
		return n
	}
	stop := func(sig syscall.Signal, grace time.Duration, why string, tell byte) {
		if stopping {
			return
		}
		stopping = true
		hb.Stop()
		a.asks.endAhead() // a job handed ahead may hold one; the tree's end waits for it
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		stopSig = sig
		n := 0
		if a.relay != nil {
			if !mainGone {
				_ = unix.Kill(r.main, syscall.SIGSTOP)
			}
			a.pool.abandon(sig) // no worker starts after this
			if n = a.relay.stop([]byte{tell, byte(sig)}); n == 0 {
				n = signalLeft()
			}
			pollTicker = time.NewTicker(quickPoll)
			pollC, hungUp, lookNow = pollTicker.C, a.relay.hungUp, true
		} else {
			var err error
			if n, err = signalTree(a.self, sig); err != nil {
				a.logf("stop: %v", err)
			}
		}
		if why != "" && n > 0 {
			a.logf("%s; %s to %d processes, SIGKILL after %v", why, unix.SignalName(sig), n, grace)
		}
		stopGrace = grace
		graceTimer = time.NewTimer(grace)
		graceC = graceTimer.C
	}
	kill := func(why string) {
		stopping = true
		hb.Stop()
		a.asks.endAhead()
		if !killing {
			killing = true
			graceC, pollC, hungUp = nil, nil, nil
			killTicker = time.NewTicker(killRepeat)
			killC = killTicker.C
		}
		n, err := signalTree(a.self, syscall.SIGKILL)
		if err != nil {
			a.logf("kill: %v", err)
		}
		if why != "" && n > 0 {
			a.logf("%s; sending SIGKILL to %d processes", why, n)
		}
	}

	// lookAlone is a quick stop's look, on its ticks and whenever a
	// worker's supervisor hangs up. Once no supervisor is left, every
	// worker is gone: the rest of the tree gets the stop's signal, and
	// torchrun, frozen, is killed at once (it is kept until then because
	// its store serves the workers through their grace). Its end, the
	// teardown of its memory, then runs beside the supervisors' own ends
	// (they go to the agent as their parent), not after them. The tree is
	// killed as soon as nothing but torchrun is left.
	lookAlone := func() {
		if pollC == nil || killing {
			return
		}
		if !leftSignalled && a.relay.clients() == 0 {
			signalLeft()
			if !mainGone {
				_ = unix.Kill(r.main, syscall.SIGKILL)
			}
		}
		if aloneLeft(a.self, r.main) {
			pollTicker.Stop()
			pollC, hungUp = nil, nil
			kill("")
		}
	}

	if a.released {
		a.release()
	}
	for {
		if lookNow {
			lookNow = false
			lookAlone()
		}
		select {
		case <-r.allGone:
			return r.exitCode()
		case <-mainDone:
			mainDone, mainGone = nil, true
			a.pool.dropIdle() // the job is over: its pool with it, and said nothing of
			stop(0, shortGrace, "job exited, leaving processes behind", wire.RelayStop)
		case c, ok := <-ctl:
			if !ok {
				ctl = nil
				stop(0, shortGrace, "head gone (stdin closed)", wire.RelayStop)
				continue
			}
			if !stopping {
				hb.Reset(heartbeat)
			}
			switch c.b {
			case wire.CtlRelease:
				a.release()
			case wire.CtlAsk:
				// A job handed ahead (Job.Gated) is asked what an agent on
				// standby is (standbyask.go) until it is released.
				go a.answer(ctx, c.line)
			case wire.CtlTell:
				if a.relay != nil {
					a.relay.tell([]byte{c.arg})
				}
			case wire.CtlSignal:
				if a.relay != nil && !killing {
					a.relay.tell([]byte{wire.RelaySignal, byte(c.sig)})
				}
			case wire.CtlTerm, wire.CtlInterrupt:
				grace := c.grace
				if grace <= 0 {
					grace = shortGrace
				}
				tell := wire.RelayStop
				if c.b == wire.CtlInterrupt {
					tell = wire.RelayHad
				}
				stop(c.sig, grace, "", tell)
			case wire.CtlKill:
				kill("")
			}
		case <-hb.C:
			stop(0, shortGrace, fmt.Sprintf("no heartbeat from head for %v", heartbeat), wire.RelayStop)
		case <-graceC:
			kill(fmt.Sprintf("still running after grace of %v", stopGrace))
		case <-killC:
			kill("")
		case <-pollC:
			lookAlone()
		case <-hungUp:
			lookAlone()
		case s := <-sigs:
			sig, ok := s.(syscall.Signal)
			if !ok || sig == syscall.SIGPIPE {
				continue
			}
			// Sent to the agent itself: by Slurm to every process of the
			// step (scancel, srun forwarding a signal), or by hand. The
			// workers hear of it once, from their supervisors.
			stop(sig, outsideGrace, "got "+unix.SignalName(sig), wire.RelayHad)
		case <-ctxDone:
			ctxDone = nil
			stop(0, shortGrace, "cancelled", wire.RelayStop)
		}
	}
}

type jobOrErr struct {
	job Job
	err error
}

// readControl reads the job line, then control messages until EOF, when
// it closes ctl. It gives up when done is closed.
func readControl(stdin io.Reader, jobc chan<- jobOrErr, ctl chan<- control, done <-chan struct{}) {
	defer close(ctl)
	br := bufio.NewReader(stdin)
	line, err := readLine(br, maxJobLine)
	if err != nil {
		jobc <- jobOrErr{err: err}
		return
	}
	var job Job
	if err := json.Unmarshal(line, &job); err != nil {
		jobc <- jobOrErr{err: fmt.Errorf("decode job: %w", err)}
		return
	}
	jobc <- jobOrErr{job: job}
	for {
		b, err := br.ReadByte()
		if err != nil {
			return // EOF, or any read error: the head is gone either way
		}
		c := control{b: b}
		switch b {
		case wire.CtlJob:
			if !job.Standby {
				continue
			}
			// The job the agent stood by for; said once.
			job.Standby = false
			line, err := readLine(br, maxJobLine)
			var next Job
			if err == nil {
				err = json.Unmarshal(line, &next)
			}
			select {
			case jobc <- jobOrErr{job: next, err: err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
			continue
		case wire.CtlTell, wire.CtlSignal:
			arg, err := br.ReadByte()
			if err != nil {
				return
			}
			c.arg, c.sig = arg, syscall.Signal(arg)
		case wire.CtlAsk:
			line, err := readLine(br, maxJobLine)
			if err != nil {
				return
			}
			c.line = line
		case wire.CtlTerm, wire.CtlInterrupt:
			var m [termLen - 1]byte
			if _, err := io.ReadFull(br, m[:]); err != nil {
				return
			}
			c.sig = syscall.Signal(m[0])
			c.grace = time.Duration(binary.BigEndian.Uint32(m[1:])) * time.Millisecond
		}
		select {
		case ctl <- c:
		case <-done:
			return
		}
	}
}

// readLine reads up to and excluding '\n', refusing lines over limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("job line longer than %d bytes", limit)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("stdin closed before the job line ended: %w", io.ErrUnexpectedEOF)
		default:
			return nil, fmt.Errorf("read job line: %w", err)
		}
	}
}

// startedJob is a job whose main process runs.
type startedJob struct {
	pid    int
	copies sync.WaitGroup
}

// wait waits for the output copies, if any were needed; they end once the
// last process holding the pipes is gone.
func (s *startedJob) wait() { s.copies.Wait() }

// startJob forks and execs the job in a new session. Stdout and stderr are
// passed as they are when they are files, so the agent copies nothing;
// other writers get a pipe and a copying goroutine.
func startJob(job Job, stdout, stderr io.Writer) (*startedJob, error) {
	env, err := mergeEnv(withoutStepVars(os.Environ()), job.Env)
	if err != nil {
		return nil, err
	}
	path, err := lookPath(job.Argv[0], envValue(env, "PATH"), job.Dir)
	if err != nil {
		return nil, err
	}
	return forkExec(path, job.Argv, env, job.Dir, job.Stdin, stdout, stderr)
}

// JobStdinFD is the agent's file descriptor of the job's stdin when
// Job.HasStdin.
const JobStdinFD = 3

// forkExec starts path with argv in a new session, stdin as given (nil:
// /dev/null), and the extra files as fds 3 and up.
func forkExec(path string, argv, env []string, dir string, stdin *os.File, stdout, stderr io.Writer, extra ...*os.File) (*startedJob, error) {
	if stdin == nil {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		defer devnull.Close()
		stdin = devnull
	}

	s := &startedJob{}
	var closeAfterFork []*os.File
	fd := func(w io.Writer) (uintptr, error) {
		if f, ok := w.(*os.File); ok {
			return f.Fd(), nil
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		closeAfterFork = append(closeAfterFork, pw)
		s.copies.Add(1)
		go func() {
			defer s.copies.Done()
			defer pr.Close()
			_, _ = io.Copy(w, pr)
		}()
		return pw.Fd(), nil
	}
	outFd, err := fd(stdout)
	if err == nil {
		var errFd uintptr
		errFd, err = fd(stderr)
		if err == nil {
			files := []uintptr{stdin.Fd(), outFd, errFd}
			for _, f := range extra {
				files = append(files, f.Fd())
			}
			s.pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
				Dir:   dir,
				Env:   env,
				Files: files,
				// Killed with the agent: nothing of a job outlives it.
				Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
			})
		}
	}
	for _, f := range closeAfterFork {
		f.Close()
	}
	if err != nil {
		s.copies.Wait() // the write ends are closed, so the copies end
		return nil, err
	}
	return s, nil
}

// mergeEnv returns base with the variables of over added or replaced, over
// sorted by name so the result does not depend on map order.
func mergeEnv(base []string, over map[string]string) ([]string, error) {
	keys := make([]string, 0, len(over))
	for k, v := range over {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("environment variable name %q is invalid", k)
		}
		if strings.ContainsRune(v, 0) {
			// The value may be a secret: name the variable only.
			return nil, fmt.Errorf("environment variable %s contains a NUL byte", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(base)+len(keys))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; ok {
			continue
		}
		env = append(env, kv)
	}
	for _, k := range keys {
		env = append(env, k+"="+over[k])
	}
	return env, nil
}

// withoutStepVars drops from an agent step's environment what Slurm says
// about the agent as that one-task step's task (SLURM_PROCID=0,
// SLURM_NTASKS=1, ...): the job's workers are not its tasks, and a
// framework that reads them (PyTorch Lightning's Slurm detection) would
// take every worker for rank 0 of 1. What is true of the workers too
// stays: the allocation (SLURM_JOB_*) and the step they run in
// (SLURM_STEP_ID). Other agents' environments are kept as they are.
func withoutStepVars(env []string) []string {
	if envValue(env, wire.AgentStepVar) == "" {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == wire.AgentStepVar || isStepVar(k) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// isStepVar reports whether a variable describes the task srun started,
// rather than the allocation or the step.
func isStepVar(k string) bool {
	switch k {
	case "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
		"SLURM_NNODES", "SLURM_TASK_PID", "SLURM_TASKS_PER_NODE", "SLURM_GTIDS",
		"SLURM_DISTRIBUTION", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_PRIO_PROCESS",
		"SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT", "SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST",
		"SLURM_CPU_BIND_TYPE", "SLURM_CPU_BIND_VERBOSE", "SLURM_UMASK", "SLURM_NODELIST":
		return true
	}
	return false
}

// envValue returns the last value of name in env, as the C library does
// not promise which one but a shell export of it wins.
func envValue(env []string, name string) string {
	val := ""
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val = v
		}
	}
	return val
}

// lookPath finds file the way a shell would with the job's own PATH (not
// the agent's); names with a slash are used as they are, relative to dir.
func lookPath(file, pathEnv, dir string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		check := p
		if !filepath.IsAbs(p) && dir != "" {
			check = filepath.Join(dir, p)
		}
		if fi, err := os.Stat(check); err == nil && fi.Mode().IsRegular() && unix.Access(check, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in $PATH: %w", os.ErrNotExist)
}

// reaper waits for every child of the agent. Because the agent is a child
// subreaper, every descendant ends up its child once its parent is gone, so
// "no child left" means the whole tree is gone.
type reaper struct {
	main     int
	mainDone chan struct{} // closed when the job's main process is reaped
	allGone  chan struct{} // closed when the agent has no child left
	status   unix.WaitStatus
	reaped   bool
	others   func(pid int, ws unix.WaitStatus) // told of every other child reaped; nil: none
}

func newReaper(main int) *reaper {
	return &reaper{main: main, mainDone: make(chan struct{}), allGone: make(chan struct{})}
}

func (r *reaper) run() {
	defer close(r.allGone)
	for {
		var ws unix.WaitStatus
		// __WALL: also children that report with a signal other than SIGCHLD.
		pid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			if !r.reaped {
				close(r.mainDone)
			}
			return // ECHILD
		}
		switch {
		case pid == r.main:
			r.status, r.reaped = ws, true
			close(r.mainDone)
		case r.others != nil:
			r.others(pid, ws)
		}
	}
}

// exitCode is the job's exit code; valid once allGone is closed.
func (r *reaper) exitCode() int {
	switch {
	case !r.reaped:
		return AgentExitBadSpec
	case r.status.Exited():
		return r.status.ExitStatus()
	case r.status.Signaled():
		return 128 + int(r.status.Signal())
	default:
		return 255
	}
}
