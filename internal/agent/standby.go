package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// The warm start (wire.Job.Preimport): a Python job's interpreter started ahead
// of the job, its imports done, waiting for the job's final arguments and
// environment. The head asks for one with sshexec.Warmer.Warm while an attempt
// runs; the next Start on that runner hands the job to it.

// warmDirPrefix begins the name of the directory that holds a standby's
// shim.
const warmDirPrefix = "gorun-warm-"

// standby is a warm interpreter waiting for its job.
type standby struct {
	job     wire.Job // what it was started for
	env     []string // its environment
	program warmProgram
	pid     int
	release *os.File // the write end of the pipe its job comes on
	// dir holds the shim, which removes it once read; removed here too if
	// the standby is killed. lock is privateDir's, held until the standby
	// is handed its job or killed. Neither for a pool's fork server, whose
	// shim is in the relay's folder, and which has room to show its job's
	// command line (poolRoom).
	dir  string
	lock *os.File
}

// startStandby starts the standby and its pool, when the job asks for
// one: the standby as the pool's fork server where the two can share
// their imports (startPoolWithMain), else side by side.
func (a *agent) startStandby(job wire.Job, stdout, stderr io.Writer) (*standby, *startedJob, error) {
	if job.Pool != nil && a.relay != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		ms, _ := startPoolWithMain(job, a.relay.dir, pr, stdout, stderr, a.logf)
		pr.Close()
		if ms != nil {
			a.setPool(ms.pool)
			return &standby{job: job, env: ms.env, program: ms.prog, pid: ms.out.pid, release: pw}, ms.out, nil
		}
		pw.Close()
	}
	sb, out, err := spawnStandby(job, stdout, stderr)
	if err == nil {
		a.startPool(job)
	}
	return sb, out, err
}

// spawnStandby starts job's interpreter with the shim, in a new session,
// with the job's environment and output streams. The error says why the
// job cannot start warm.
func spawnStandby(job wire.Job, stdout, stderr io.Writer) (*standby, *startedJob, error) {
	env, err := mergeEnv(withoutStepVars(os.Environ()), job.Env)
	if err != nil {
		return nil, nil, err
	}
	prog, err := pythonProgram(job.Argv, env, job.Dir)
	if err != nil {
		return nil, nil, err
	}
	// The shim is a file, not -c CODE, so that ps shows a short command
	// line: python3 /tmp/gorun-warm-*/warm.py script /usr/bin/torchrun ...
	dir, lock, err := privateDir(warmDirPrefix)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*standby, *startedJob, error) {
		os.RemoveAll(dir)
		lock.Close()
		return nil, nil, err
	}
	shim := filepath.Join(dir, "warm.py")
	if err := os.WriteFile(shim, []byte(warmPy), 0o600); err != nil {
		return fail(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer pr.Close()
	argv := append(append(slices.Clone(prog.interp), shim, prog.mode, prog.target), job.Preimport...)
	started, err := forkExec(argv[0], argv, env, job.Dir, job.Stdin, stdout, stderr, pr)
	if err != nil {
		pw.Close()
		return fail(err)
	}
	return &standby{job: job, env: env, program: prog, pid: started.pid, release: pw, dir: dir, lock: lock}, started, nil
}

// handOver gives the standby job when it fits: the same program, folder
// and modules, and the same import-time variables; ready runs just before
// the job goes. It returns why the standby cannot run job ("" when it was
// handed over), or what went wrong handing it.
func (s *standby) handOver(job wire.Job, ready func()) (string, error) {
	env, err := mergeEnv(withoutStepVars(os.Environ()), job.Env)
	if err != nil {
		return "", err
	}
	prog, err := pythonProgram(job.Argv, env, job.Dir)
	switch {
	case err != nil:
		return err.Error(), nil
	case !slices.Equal(prog.interp, s.program.interp) || prog.mode != s.program.mode || prog.target != s.program.target:
		return fmt.Sprintf("the program changed (%s)", strings.Join(job.Argv[:1], " ")), nil
	case job.Dir != s.job.Dir:
		return "the working directory changed", nil
	case !slices.Equal(job.Preimport, s.job.Preimport):
		return "the modules to import first changed", nil
	}
	for _, name := range changedVars(s.env, env) {
		if importTimeVar(name) && (s.forksWorkers() || !computeVar(name)) {
			return fmt.Sprintf("%s, read at import time, changed", name), nil
		}
	}
	var shown []string
	if s.forksWorkers() { // it has the room
		shown = prog.shown()
	}
	ready()
	return "", s.hand(env, job.Dir, prog.args, shown, job.WaitFor)
}

// forksWorkers reports whether the standby is its workers' fork server:
// what it imported, they have.
func (s *standby) forksWorkers() bool { return s.dir == "" }

// computeVar reports whether a variable read at import time only shapes
// the computing of the process that reads it: its threads (read as
// OpenMP, MKL, OpenBLAS or numexpr loads) or its GPUs (read as CUDA
// initialises, which importing torch does not do). A standby that forks
// no worker may differ from its job in one: torchrun's own process
// computes nothing and initialises no GPU before it has its job's
// environment, and its workers are new processes that read their own
// environment, the job's. The plan sets both kinds from preflight's
// facts, which the first attempt's standby starts without (WarmFirst).
func computeVar(name string) bool {
	if name == "CUDA_VISIBLE_DEVICES" || name == "CUDA_DEVICE_ORDER" {
		return true
	}
	for _, p := range []string{"OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS", "NUMEXPR_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// changedVars lists the names whose values differ between two
// environments, sorted.
func changedVars(a, b []string) []string {
	am, bm := envMap(a), envMap(b)
	var names []string
	for k, v := range am {
		if w, ok := bm[k]; !ok || w != v {
			names = append(names, k)
		}
	}
	for k := range bm {
		if _, ok := am[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// hand writes the standby its job: the environment, working directory
// and arguments it runs with, and the address it waits for first
// (wire.Job.WaitFor; "": none).
func (s *standby) hand(env []string, dir string, args, shown []string, waitFor string) error {
	type wait struct {
		Host  string  `json:"host"`
		Port  string  `json:"port"`
		Limit float64 `json:"limit_s"`
	}
	var w *wait
	if waitFor != "" {
		host, port, err := net.SplitHostPort(waitFor)
		if err != nil {
			return fmt.Errorf("the address to wait for: %w", err)
		}
		w = &wait{host, port, wire.WaitForLimit.Seconds()}
	}
	line, err := json.Marshal(struct {
		Env   []string `json:"env"`
		Dir   string   `json:"dir"`
		Args  []string `json:"args"`
		Shown []string `json:"shown,omitempty"` // for ps
		Wait  *wait    `json:"wait_for,omitempty"`
	}{env, dir, args, shown, w})
	if err != nil {
		return err
	}
	_, err = s.release.Write(append(line, '\n'))
	if cerr := s.release.Close(); err == nil {
		err = cerr
	}
	if s.lock != nil {
		s.lock.Close()
	}
	return err
}

// kill ends the standby and whatever it started.
func (s *standby) kill() {
	s.release.Close()
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.lock.Close()
	}
	_ = syscall.Kill(-s.pid, syscall.SIGKILL) // its own session and group
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
}

// selfArg puts the agent's own executable in place of wire.SelfArg.
func selfArg(argv []string) {
	if self, err := os.Executable(); err == nil {
		for i, arg := range argv {
			if arg == wire.SelfArg {
				argv[i] = self
			}
		}
	}
}

// standBy runs an agent on standby: it starts the job's interpreter warm
// (startStandby), keeps it while the head's heartbeats come, and, when the
// job itself comes (wire.CtlJob), hands it over if it fits, or starts the job
// cold. It returns the job, its main process and the reaper of its tree;
// a nil reaper means the agent is done, with the exit code: the head went
// away, stopped the standby, or sent a bad job line. Either way the
// standby is gone by then.
func (a *agent) standBy(ctx context.Context, sj wire.Job, stdout, stderr io.Writer, jobc <-chan jobOrErr,
	ctl <-chan control, sigs <-chan os.Signal) (wire.Job, *startedJob, *reaper, int) {
	heartbeat := sj.Heartbeat
	if heartbeat <= 0 {
		heartbeat = wire.DefaultHeartbeatTimeout
	}
	var r *reaper
	var mainDone <-chan struct{}
	cold := ""
	sb, sbOut, err := a.startStandby(sj, stdout, stderr)
	if err != nil {
		cold = err.Error()
	} else {
		r = a.reapChildren(sb.pid)
		go r.run()
		mainDone = r.mainDone
	}
	// The standby and its pool go together: a cold job starts a pool of
	// its own.
	drop := func() {
		a.asks.endAhead() // before waiting for every child to go: they end on it
		if sb != nil {
			sb.kill()
			a.dropPool()
			<-r.allGone
			sbOut.wait()
			sb = nil
		}
	}
	hb := time.NewTimer(heartbeat)
	defer hb.Stop()
	a.asks.startAhead(sj.AskAhead)
	gated := false
	defer func() {
		if !gated {
			a.asks.endAhead() // not asked by the time the job came: not needed
		}
	}()
	a.sayReady()
	var job wire.Job
	for waiting := true; waiting; {
		select {
		case jr := <-jobc:
			if jr.err != nil || len(jr.job.Argv) == 0 {
				a.logf("read job after standby: %v", jr.err)
				drop()
				return wire.Job{}, nil, nil, ExitBadSpec
			}
			job, waiting = jr.job, false
		case c, ok := <-ctl:
			switch {
			case !ok || c.b == wire.CtlTerm || c.b == wire.CtlInterrupt || c.b == wire.CtlKill:
				drop() // the head went away, or wants no job after all
				return wire.Job{}, nil, nil, ExitBadSpec
			case c.b == wire.CtlAsk:
				go a.answer(ctx, c.line)
			case c.b == wire.CtlRelease:
				// The head releases only the job it handed ahead, which
				// came first and waits in jobc (read after this, as both
				// were ready): supervise releases it as it begins.
				a.released = true
			}
			hb.Reset(heartbeat)
		case <-hb.C:
			a.logf("no heartbeat from head for %v on standby", heartbeat)
			drop()
			return wire.Job{}, nil, nil, ExitBadSpec
		case s := <-sigs:
			if s == syscall.SIGPIPE {
				continue
			}
			drop()
			return wire.Job{}, nil, nil, ExitBadSpec
		case <-ctx.Done():
			drop()
			return wire.Job{}, nil, nil, ExitBadSpec
		case <-mainDone:
			mainDone = nil
			a.asks.endAhead() // before waiting for every child to go (waitWords); asked now, such a check starts afresh
			cold = fmt.Sprintf("the warm interpreter ended before the job came (%s)", waitWords(r))
			a.dropPool()
			<-r.allGone
			sbOut.wait()
			sb = nil
		}
	}
	selfArg(job.Argv)
	job.Stdin = sj.Stdin // the agent's, from its start
	job.Relay = sj.Relay // the relay is the standby's, already in its environment
	if job.Relay {
		job.Env = withRelay(job.Env, sj.Env[wire.RelaySocketVar], sj.Env[wire.PoolSocketVar])
		if job.Pool != nil && a.relay != nil {
			// Where a standby started without the pool (the first
			// attempt's, WarmFirst), its job brings it, warm or cold.
			job.Env[wire.PoolSocketVar] = a.relay.poolPath()
		}
		if job.Gated && a.relay != nil {
			// Handed ahead: the job starts now, its workers when the head
			// releases it (wire.CtlRelease). Until then the head may still ask
			// (the GPU teardown check), and what was started ahead for it
			// stays (supervise ends it at the release or the stop).
			gated = true
			a.relay.gate()
			job.Env[wire.GateVar] = "1"
		}
	}
	if sb != nil && cold == "" {
		// A job that brings a pool to a standby that has none (the first
		// attempt's, started while preflight ran, before the plan knew
		// the slots' CPUs): the pool starts as the job is handed over,
		// where the job's start would have started it.
		late := job.Pool != nil && a.pool == nil && a.relay != nil
		why, err := sb.handOver(job, func() {
			if late {
				a.startPool(job)
			}
		})
		switch {
		case err != nil:
			cold = err.Error()
		case why != "":
			cold = why
		default:
			a.startInfo(wire.StartInfo{Warm: true, Time: time.Now().UnixNano()})
			return job, sbOut, r, 0
		}
	}
	drop()
	a.startInfo(wire.StartInfo{Cold: cold, Time: time.Now().UnixNano()})
	out, err := a.startJob(job, stdout, stderr)
	if err != nil {
		a.logf("start %s: %v", job.Argv[0], err)
		return wire.Job{}, nil, nil, ExitNoStart
	}
	r = a.reapChildren(out.pid)
	go r.run()
	return job, out, r, 0
}

// withRelay is env with the relay's socket variables set to the
// standby's: its relay socket, and its pool's ("": none).
func withRelay(env map[string]string, sock, pool string) map[string]string {
	out := make(map[string]string, len(env)+2)
	for k, v := range env {
		out[k] = v
	}
	out[wire.RelaySocketVar] = sock
	delete(out, wire.PoolSocketVar)
	if pool != "" {
		out[wire.PoolSocketVar] = pool
	}
	return out
}

// startInfo tells the head how the job started, on a relayed stream.
func (a *agent) startInfo(info wire.StartInfo) {
	if a.relay == nil {
		return
	}
	a.relay.write(startFrame(info))
}

// startFrame is info as a wire.FrameStart frame.
func startFrame(info wire.StartInfo) []byte {
	b, _ := json.Marshal(info)
	return wire.AppendFrame(nil, wire.FrameStart, b)
}

// waitWords says how a reaped main process ended.
func waitWords(r *reaper) string {
	<-r.allGone
	switch {
	case !r.reaped:
		return "not reaped"
	case r.status.Exited():
		return fmt.Sprintf("exit %d", r.status.ExitStatus())
	default:
		return fmt.Sprintf("signal %d", r.status.Signal())
	}
}
