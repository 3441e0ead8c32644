package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/logdir"
	"github.com/gorun/gorun/internal/wire"

	"golang.org/x/sys/unix"
)

// Exit codes of the agent itself, when the job never ran.
const (
	// ExitBadSpec: the job line was missing, unreadable or invalid.
	ExitBadSpec = 125
	// ExitNoStart: the job could not be started (exec failed).
	ExitNoStart = 127
)

// ServeAgent runs the node agent, `gorun _agent`, and returns its exit code.
//
// It reads one JSON line (a wire.Job) from stdin, starts the job in a new session
// with stdin /dev/null and stdout/stderr on its own stdout/stderr, and then
// reads control bytes from stdin: 'h' heartbeat, 't' graceful stop, 'k'
// kill now, 'r' and a byte to pass to the relay clients (wire.Job.Relay). EOF
// on stdin, a missed heartbeat (wire.Job.Heartbeat), SIGTERM, SIGINT, SIGHUP or
// ctx being cancelled stop the job gracefully: SIGTERM to
// every descendant, wire.Job.Grace, then SIGKILL until none is left. The agent is
// a child subreaper, so workers that their parent left behind (torchrun's
// workers run in sessions of their own) are reparented to it and are killed
// too. When the job's main process exits by itself, leftovers are stopped
// the same way. The agent reaps every child and returns only when its whole
// tree is gone. The job starts with default signal dispositions and an
// empty signal mask, whatever the agent's own were.
//
// The result is the job's exit code, or 128+signal if it died by a signal,
// also after a stop (the head knows it asked). ExitNoStart (127) means
// the job could not start, ExitBadSpec (125) that the job line was
// bad or came from a head of another wire.Protocol (one line on stderr
// names both versions). Nothing but the job's output goes to stdout; the agent's own messages
// go to stderr prefixed "gorun agent: ".
func ServeAgent(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	return ServeAgentWith(ctx, nil, stdin, stdout, stderr)
}

// Sidecar runs inside the agent beside a relayed job that carries
// wire.Job.Sidecar settings, from the job's start until its main process exits
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
		return ExitBadSpec
	}

	done := make(chan struct{})
	defer close(done)
	jobc := make(chan jobOrErr, 2)
	ctl := make(chan control, 16)
	go readControl(stdin, jobc, ctl, done)

	var job wire.Job
	specTimer := time.NewTimer(wire.DefaultHeartbeatTimeout)
	select {
	case r := <-jobc:
		specTimer.Stop()
		if r.err != nil {
			a.logf("read job: %v", r.err)
			return ExitBadSpec
		}
		job = r.job
	case <-specTimer.C:
		a.logf("read job: nothing received for %v", wire.DefaultHeartbeatTimeout)
		return ExitBadSpec
	case <-ctx.Done():
		specTimer.Stop()
		return ExitBadSpec
	}
	if job.Protocol != wire.Protocol {
		a.logf("%s", wire.ProtocolMismatch(job.Protocol, wire.Protocol))
		return ExitBadSpec
	}
	if len(job.Argv) == 0 || job.Argv[0] == "" {
		a.logf("read job: empty argv")
		return ExitBadSpec
	}
	selfArg(job.Argv)
	if job.HasStdin {
		job.Stdin = os.NewFile(wire.JobStdinFD, "job stdin")
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
			return ExitNoStart
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
			return ExitNoStart
		}
		r = a.reapChildren(out.pid)
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
	relay  *relay // nil unless wire.Job.Relay
	pool   *pool  // nil unless wire.Job.Pool, and once dropped
	// reapsTo is pool, for the reapers' goroutines (setPool).
	reapsTo atomic.Pointer[pool]
	asks    asks // children run for the head's asks (standbyask.go)
	// released: the head released the job handed ahead (wire.CtlRelease)
	// before the agent on standby had taken the job; supervise releases
	// it as it begins.
	released bool
}

// release releases a job handed ahead (wire.Job.Gated): its workers'
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
func (a *agent) startJob(job wire.Job, stdout, stderr io.Writer) (*startedJob, error) {
	if job.Pool != nil && a.relay != nil {
		if ms, _ := startPoolWithMain(job, a.relay.dir, nil, stdout, stderr, a.logf); ms != nil {
			a.setPool(ms.pool)
			return ms.out, nil
		}
	}
	out, err := spawnJob(job, stdout, stderr)
	if err == nil {
		a.startPool(job)
	}
	return out, err
}

// startPool starts the job's worker pool, when it asks for one; without
// it the workers start as ever.
func (a *agent) startPool(job wire.Job) {
	if job.Pool == nil || a.relay == nil {
		return
	}
	p, err := spawnPool(job, a.relay.dir, a.logf, a.setPool)
	if err != nil {
		// Each worker's supervisor asks anyway (the job has the socket's
		// name already): it is told why, and the node says so once.
		if p = noPool(a.relay.poolPath(), "the node's pool did not start: "+err.Error(), a.logf); p == nil {
			a.logf("pool: %v; the workers start without it", err)
			return
		}
	}
	a.setPool(p)
}

// setPool makes p the agent's pool, and the one its reapers tell of the
// children they reap.
func (a *agent) setPool(p *pool) {
	a.pool = p
	a.reapsTo.Store(p)
}

// dropPool kills the pool's interpreters and forgets it.
func (a *agent) dropPool() {
	a.pool.close()
	a.setPool(nil)
}

// reapChildren is a reaper of the agent's children that tells the asks and
// the pool of their children's ends: the pool of the moment, which a
// standby handed a job that brings one starts after its reaper.
func (a *agent) reapChildren(main int) *reaper {
	r := newReaper(main)
	r.others = func(pid int, ws unix.WaitStatus) {
		if a.asks.reaped(pid, ws) {
			return
		}
		if p := a.reapsTo.Load(); p != nil {
			p.reaped(pid, ws)
		}
	}
	return r
}

func (a *agent) logf(format string, args ...any) {
	// Errors are ignored: stderr may be a pipe to a head that is gone.
	_, _ = fmt.Fprintf(a.stderr, "gorun agent: "+format+"\n", args...)
}
