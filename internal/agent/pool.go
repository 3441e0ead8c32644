package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/sys/unix"
)

// The worker pool (wire.Job.Pool): Python interpreters the agent starts beside
// the job, one per slot, their imports done, each waiting for a worker to
// become. The imports are done once: a fork server (warm.py pool) imports
// the modules and forks a slot's interpreter for each slot that shares its
// import-time environment, then exits. The agent, a child subreaper,
// becomes their parent, so it reaps each and tells its supervisor how it
// ended. A worker's supervisor takes its slot's interpreter through the
// socket that wire.PoolSocketVar names (TakePooled): it hands over the
// worker's environment, folder, script and streams, and the interpreter
// becomes the worker. The supervisor signals it, and when the supervisor
// hangs up first the agent kills it.

// poolRoom is the room, in bytes, each pooled interpreter starts with
// beyond its own command line and environment (an argument of spaces, a
// variable of dots), which its worker's, written over them, may use: a
// worker then shows its own in ps, pgrep -f and /proc/PID/cmdline and
// environ, as a cold start's would.
const poolRoom = 4096

// roomArgs are the arguments that make a pooled interpreter's room for
// its worker's command line: poolRoom bytes, or what the worker's
// arguments take where that is more, in arguments of at most 64 KiB
// (Linux takes none longer than 128 KiB).
func roomArgs(pool *wire.Pool) []string {
	need := poolRoom
	if n := len("python -u -m ") + len(strings.Join(pool.Worker, " ")) + 1; n > need {
		need = n + poolRoom
	}
	var args []string
	for need > 0 {
		n := min(need, 64<<10)
		args = append(args, strings.Repeat(" ", n-1))
		need -= n
	}
	return args
}

// poolHandTimeout bounds a supervisor's request and the hand-off.
const poolHandTimeout = 2 * time.Second

// poolWait is wire.Pool.Wait's default: an import of torch from a slow shared
// filesystem, thousands of nodes at once, takes a minute or two.
const poolWait = 5 * time.Minute

// pool is the agent's side of wire.Job.Pool.
type pool struct {
	ln     *net.UnixListener
	interp string
	dir    string
	late   []string
	wait   time.Duration // wire.Pool.Wait
	logf   func(format string, args ...any)
	off    string // why no interpreter was started (wire.Pool.Auto); "": they were

	mu    sync.Mutex
	slots []*poolSlot             // by local rank; nil: none, or taken
	forks map[int]*poolFork       // the fork servers, by pid, until their slots are forked
	byPID map[int]*poolSlot       // the slots' interpreters, once forked
	early map[int]unix.WaitStatus // reaped before their fork server named them
	// learned: each learned file's text as the pool's first claim read it
	// ("": none), so the ranks of one attempt all start pooled or all cold
	learned map[string]string
	conns   sync.WaitGroup

	stopped  chan struct{}  // closed by abandon
	stopSig  syscall.Signal // abandon's; set before stopped is closed
	stopOnce sync.Once
}

// poolFork is a fork server: one interpreter that imports the modules
// for the slots that share its environment and CPUs, and forks theirs.
type poolFork struct {
	pid   int
	env   []string // as the agent started it
	slots []*poolSlot
	ctrl  *net.UnixConn // its fd 3, our end
	// started is its environment as the interpreter has it, once it said
	// (Python may set LC_CTYPE as it starts); nil if it never did.
	started []string
	// script is what it read of the workers' script before its imports
	// (warm.py _scan), said with started.
	script      scriptVerdict
	startedRead chan struct{} // closed once started is read, or never will be
}

type poolSlot struct {
	fork *poolFork
	cpus []int
	ctrl *net.UnixConn // the interpreter's fd 3, our end
	// Under pool.mu: pid is 0 until the fork server names it; forked is
	// closed then, or once it never will (the server ended first).
	pid      int
	forked   chan struct{}
	unwanted bool          // killed before it was forked: killed once it is
	gone     chan struct{} // closed once reaped, or never forked
	status   unix.WaitStatus
}

// spawnPool starts job's pool with its socket in dir; it must be called
// from the agent's locked thread (the fork servers' parent-death signal is
// tied to it). known is given the pool before any of its interpreters
// starts, for the reaper to pass it their ends (reaped). The error says
// why no pool could start; the job runs without one.
func spawnPool(job wire.Job, dir string, logf func(string, ...any), known func(*pool)) (*pool, error) {
	pp, err := planPool(job)
	if err != nil {
		return nil, err
	}
	p, err := pp.listen(job, dir, logf)
	if err != nil {
		return nil, err
	}
	known(p)
	if n := len(pp.groups); job.Pool.Auto && n > 0 {
		p.off = autoPoolOff(usableCPUs(), n, job.Pool.Beside, idleCPUs)
	}
	p.mu.Lock()                               // the reaper waits until each fork server is known
	failed, failedAt, started := "", 0, false // the first server's failure, its first slot; whether one started
	for k, g := range pp.groups {
		if p.off != "" {
			break
		}
		f, err := p.startFork(job, g, dir, k)
		switch {
		case err != nil && failed == "":
			failed, failedAt = err.Error(), g.slots[0]
		case err != nil:
			logf("pool: interpreter for slots %v: %v", g.slots, err)
		default:
			started = true
			p.adopt(f, g)
		}
	}
	if failed != "" && !started {
		p.off = "the node's pool did not start: " + failed // each worker is told
	} else if failed != "" {
		logf("pool: interpreter for slot %d: %v", failedAt, failed)
	}
	p.mu.Unlock()
	p.conns.Add(1)
	go p.accept()
	return p, nil
}

// poolPlan is what a pool is made of before anything starts.
type poolPlan struct {
	base   []string // the job's environment
	interp string   // the workers' interpreter, as a path
	dir    string   // the workers' folder
	groups []forkGroup
}

func planPool(job wire.Job) (poolPlan, error) {
	base, err := mergeEnv(withoutStepVars(os.Environ()), job.Env)
	if err != nil {
		return poolPlan{}, err
	}
	interp := envValue(base, "PYTHON_EXEC") // torchrun's own rule for its workers
	if interp == "" {
		prog, err := pythonProgram(job.Argv, base, job.Dir)
		if err != nil {
			return poolPlan{}, err
		}
		interp = prog.interp[0]
	}
	if interp, err = lookPath(interp, envValue(base, "PATH"), job.Dir); err != nil {
		return poolPlan{}, err
	}
	wd := job.Dir
	if wd == "" {
		if wd, err = os.Getwd(); err != nil {
			return poolPlan{}, err
		}
	}
	groups, err := forkGroups(job, base)
	if err != nil {
		return poolPlan{}, err
	}
	return poolPlan{base: base, interp: interp, dir: wd, groups: groups}, nil
}

// listen makes the pool, listening on its socket in dir, with no
// interpreter started yet.
func (pp poolPlan) listen(job wire.Job, dir string, logf func(string, ...any)) (*pool, error) {
	var sub int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&sub)), 0, 0, 0); err != nil || sub == 0 {
		// The forked interpreters would go to init, out of the agent's reach.
		return nil, errors.New("the agent is not a child subreaper")
	}
	path := filepath.Join(dir, "pool")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	wait := job.Pool.Wait
	if wait <= 0 {
		wait = poolWait
	}
	return &pool{ln: ln, interp: pp.interp, dir: pp.dir, late: job.Pool.Late, wait: wait, logf: logf, stopped: make(chan struct{}),
		slots: make([]*poolSlot, len(job.Pool.Slots)), forks: map[int]*poolFork{}, byPID: map[int]*poolSlot{}, early: map[int]unix.WaitStatus{}}, nil
}

// adopt makes f's slots the pool's; under p.mu.
func (p *pool) adopt(f *poolFork, g forkGroup) {
	for i, sl := range f.slots {
		p.slots[g.slots[i]] = sl
	}
}

// The job's main process as its own workers' fork server: torchrun is a
// Python program, and the interpreter that runs it can import the pool's
// modules for itself and for its workers at once, where two would import
// them side by side (one for torchrun's own start, one for the pool). On
// a node whose CPUs are busy, as at a launch, that is one import of torch
// less on the way to the workers' first line. It is done only where
// nothing that either sees changes: the same interpreter, run without
// options of its own; one fork server for every slot; the same value of
// every variable read at import but PYTHONFAULTHANDLER, which the slots
// arm as Python would have at their start; and slots whose CPU binding
// sizes no library's threads as it loads (OMP_NUM_THREADS set, or none).

// sharedImport says why job's main process cannot be its pool's fork
// server, "" when it can.
func (pp poolPlan) sharedImport(job wire.Job) (warmProgram, string) {
	prog, err := pythonProgram(job.Argv, pp.base, job.Dir)
	switch {
	case err != nil:
		return prog, err.Error()
	case len(prog.interp) != 1 || prog.interp[0] != pp.interp:
		return prog, fmt.Sprintf("torchrun runs under %s, its workers under %s", strings.Join(prog.interp, " "), pp.interp)
	case len(pp.groups) != 1:
		return prog, "the workers import with environments or CPUs of their own"
	case len(job.Pool.Modules) == 0:
		return prog, "the pool imports nothing"
	}
	g := pp.groups[0]
	if len(g.cpus) > 0 && envValue(g.env, "OMP_NUM_THREADS") == "" {
		return prog, "the workers' CPU binding would size OpenMP's threads at import"
	}
	for _, name := range changedVars(pp.base, g.env) {
		if importTimeVar(name) && name != "PYTHONFAULTHANDLER" {
			return prog, fmt.Sprintf("%s, read at import time, differs between torchrun and its workers", name)
		}
	}
	return prog, ""
}

// mainServer is a job's main process started as its pool's fork server.
type mainServer struct {
	out  *startedJob
	pool *pool
	prog warmProgram
	env  []string // the main process's environment
}

// startPoolWithMain starts job's main process as the fork server of its
// own workers' pool (warm.py main) where the two can share their imports
// (sharedImport), with the job's environment, folder and streams, as
// spawnJob would start it; with release (the read end of a pipe), as a
// standby (spawnStandby) whose job comes on that pipe. Otherwise it starts
// nothing and says why; so does a pool that cannot listen. The rules of
// spawnPool apply.
func startPoolWithMain(job wire.Job, dir string, release *os.File, stdout, stderr io.Writer, logf func(string, ...any)) (*mainServer, string) {
	pp, err := planPool(job)
	if err != nil {
		return nil, err.Error()
	}
	prog, why := pp.sharedImport(job)
	if why != "" {
		return nil, why
	}
	p, err := pp.listen(job, dir, logf)
	if err != nil {
		return nil, err.Error()
	}
	g := pp.groups[0]
	main := struct {
		Mode      string   `json:"mode"`
		Target    string   `json:"target"`
		Args      []string `json:"args,omitempty"`
		Shown     []string `json:"shown,omitempty"` // a cold start's argv, for ps
		Pipe      int      `json:"pipe,omitempty"`  // a standby's job comes on this fd
		Preimport []string `json:"preimport,omitempty"`
	}{Mode: prog.mode, Target: prog.target}
	var extra []*os.File
	if release != nil {
		main.Pipe, main.Preimport, extra = 4+len(g.slots), job.Preimport, []*os.File{release}
	} else {
		main.Args, main.Shown = prog.args, prog.shown()
	}
	p.mu.Lock() // the reaper waits until the server is known
	defer p.mu.Unlock()
	f, out, err := p.startServer(job, g, dir, "main", main, pp.base, stdout, stderr, extra...)
	if err != nil {
		p.ln.Close()
		return nil, err.Error()
	}
	p.adopt(f, g)
	p.conns.Add(1)
	go p.accept()
	return &mainServer{out: out, pool: p, prog: prog, env: pp.base}, ""
}

// forkGroup is the slots one fork server serves: the same environment,
// and CPUs for its imports.
type forkGroup struct {
	env   []string
	cpus  []int // the server's binding; none: unbound
	slots []int // local ranks
	sets  [][]int
}

// forkGroups sorts job's slots by what their interpreters import with:
// slots with the same environment share a fork server. Their CPUs must
// be the same too, unless OMP_NUM_THREADS is set: OpenMP sizes its
// threads by the CPUs it may use as it loads, unless told. Then the
// server imports on the CPUs of all its slots, and each interpreter is
// bound to its own once forked.
func forkGroups(job wire.Job, base []string) ([]forkGroup, error) {
	var groups []forkGroup
	at := map[string]int{}
	for i, s := range job.Pool.Slots {
		over := make(map[string]string, len(s.Env)+len(s.Default))
		for k, v := range s.Default {
			if _, ok := job.Env[k]; !ok && envValue(base, k) == "" {
				over[k] = v
			}
		}
		for k, v := range s.Env {
			over[k] = v
		}
		env, err := mergeEnv(base, over)
		if err != nil {
			return nil, err
		}
		env = slices.DeleteFunc(env, func(kv string) bool {
			k, _, _ := strings.Cut(kv, "=")
			return k == wire.RelaySocketVar || k == wire.PoolSocketVar
		})
		key := strings.Join(env, "\x00")
		if envValue(env, "OMP_NUM_THREADS") == "" {
			key += fmt.Sprintf("\x00cpus=%v", s.CPUs)
		}
		k, ok := at[key]
		if !ok {
			k, at[key] = len(groups), len(groups)
			groups = append(groups, forkGroup{env: env, cpus: s.CPUs})
		}
		g := &groups[k]
		g.slots, g.sets = append(g.slots, i), append(g.sets, s.CPUs)
		if !slices.Equal(g.cpus, s.CPUs) && len(g.cpus) > 0 {
			g.cpus = union(g.cpus, s.CPUs) // unbound (none) stays unbound
		}
	}
	return groups, nil
}

// union is the sorted CPUs of a and b; none if either is none (unbound).
func union(a, b []int) []int {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	u := slices.Concat(a, b)
	slices.Sort(u)
	return slices.Compact(u)
}

// noPool answers every supervisor at path that its worker starts cold,
// and why; nil when it cannot listen there.
func noPool(path, why string, logf func(string, ...any)) *pool {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil
	}
	p := &pool{ln: ln, off: why, logf: logf, byPID: map[int]*poolSlot{}, stopped: make(chan struct{})}
	p.conns.Add(1)
	go p.accept()
	return p
}

// startFork starts group g's fork server, the k-th, with a shim of its
// own in dir (the relay's private folder, which goes with the agent),
// removed once read; a socket pair for it and one for each of its slots.
// Under p.mu.
func (p *pool) startFork(job wire.Job, g forkGroup, dir string, k int) (*poolFork, error) {
	// What it prints while it imports, it holds, and each interpreter
	// writes to its worker's streams once it has them (warm.py).
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	f, _, err := p.startServer(job, g, dir, fmt.Sprint(k), nil, g.env, devnull, devnull)
	return f, err
}

// startServer starts a fork server for group g: warm.py pool, named by
// name in dir, or, with main (what warm.py main runs once the slots are
// forked), the job's main process. env is its environment, stdout and
// stderr its streams, and extra its fds after the slots' sockets. Under
// p.mu.
func (p *pool) startServer(job wire.Job, g forkGroup, dir, name string, main any, env []string, stdout, stderr io.Writer, extra ...*os.File) (*poolFork, *startedJob, error) {
	shim := filepath.Join(dir, "warm-"+name+".py")
	if err := os.WriteFile(shim, []byte(warmPy), 0o600); err != nil {
		return nil, nil, err
	}
	type slotSettings struct {
		CPUs []int `json:"cpus,omitempty"`
	}
	type script struct {
		Target string `json:"target"`
		Module bool   `json:"module,omitempty"`
	}
	type rules struct {
		Prefixes []string `json:"prefixes"`
		Names    []string `json:"names"`
	}
	settings := struct {
		CPUs         []int          `json:"cpus,omitempty"`
		Signals      []int          `json:"signals,omitempty"`
		Modules      []string       `json:"modules"`
		Slots        []slotSettings `json:"slots"`
		Main         any            `json:"main,omitempty"`
		FaultHandler bool           `json:"faulthandler,omitempty"`
		Script       *script        `json:"script,omitempty"`
		ImportTime   rules          `json:"import_time"`
		Coerce       bool           `json:"coerce,omitempty"`
	}{Signals: job.PassSignals, Modules: job.Pool.Modules, Main: main, Coerce: coercedLocale(env)}
	settings.ImportTime.Prefixes, settings.ImportTime.Names = importTimeRules()
	if len(job.Pool.Worker) > 0 {
		settings.Script = &script{job.Pool.Worker[0], job.Pool.Module}
	}
	mode, stdin := "main", job.Stdin
	if main == nil {
		mode, stdin, settings.CPUs = "pool", nil, g.cpus
	} else {
		// The slots have it armed as Python arms it at its start, before
		// its signal module reads the handlers (signal.getsignal shows
		// faulthandler's as not Python's, as in a cold worker): the
		// interpreter starts with it, and the program's side disarms it
		// (warm.py main). A pool's own server starts with the slots'
		// environment.
		settings.FaultHandler = envValue(g.env, "PYTHONFAULTHANDLER") != "" && envValue(env, "PYTHONFAULTHANDLER") == ""
	}
	for _, c := range g.sets {
		settings.Slots = append(settings.Slots, slotSettings{c})
	}
	b, err := json.Marshal(settings)
	if err != nil {
		return nil, nil, err
	}
	var ours []*net.UnixConn
	var theirs []*os.File
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
	}()
	fail := func(err error) (*poolFork, *startedJob, error) {
		for _, c := range ours {
			c.Close()
		}
		os.Remove(shim)
		return nil, nil, err
	}
	for range 1 + len(g.slots) {
		c, f, err := socketPair()
		if err != nil {
			return fail(err)
		}
		ours, theirs = append(ours, c), append(theirs, f)
	}
	f := &poolFork{env: g.env, ctrl: ours[0], startedRead: make(chan struct{})}
	for i, c := range ours[1:] {
		f.slots = append(f.slots, &poolSlot{fork: f, cpus: g.sets[i], ctrl: c, forked: make(chan struct{}), gone: make(chan struct{})})
	}
	argv := append([]string{p.interp, "-u", shim, mode, string(b)}, roomArgs(job.Pool)...)
	if main != nil {
		argv = slices.Delete(argv, 1, 2) // the program's own interpreter: no -u (its slots write as -u would)
	}
	withRoom := append(slices.Clip(env), wire.PoolRoomVar+"="+strings.Repeat(".", poolRoom))
	if settings.FaultHandler {
		withRoom = append(withRoom, "PYTHONFAULTHANDLER=1")
	}
	started, err := forkExec(p.interp, argv, withRoom, p.dir, stdin, stdout, stderr, append(slices.Clip(theirs), extra...)...)
	if err != nil {
		return fail(fmt.Errorf("start %s: %w", p.interp, err))
	}
	f.pid = started.pid
	p.forks[f.pid] = f
	go p.watchFork(f)
	return f, started, nil
}

// coercedLocale reports whether Python started with env coerces its C
// locale (PEP 538: LC_CTYPE set to C.UTF-8 in its environment) and turns
// on its UTF-8 mode (PEP 540). A worker started by torchrun gets the
// coerced LC_CTYPE from torchrun's own start and so starts in neither; a
// pooled interpreter started so would be in UTF-8 mode for good. warm.py
// starts such an interpreter again with the coerced LC_CTYPE, as the
// workers have it.
func coercedLocale(env []string) bool {
	if envValue(env, "LC_ALL") != "" || envValue(env, "PYTHONCOERCECLOCALE") == "0" || envValue(env, "PYTHONUTF8") != "" {
		return false
	}
	l := envValue(env, "LC_CTYPE")
	if l == "" {
		l = envValue(env, "LANG")
	}
	return l == "" || l == "C" || l == "POSIX"
}

// socketPair is a connected pair of unix stream sockets: ours, and the
// end a child gets.
func socketPair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "pool"), os.NewFile(uintptr(fds[1]), "pool")
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, nil, err
	}
	return c.(*net.UnixConn), theirs, nil
}

// watchFork reads what fork server f says, its environment as it started
// and then its slots' pids, and settles its slots when it ends: those it
// did not name will never be forked.
func (p *pool) watchFork(f *poolFork) {
	br := bufio.NewReader(f.ctrl)
	defer f.ctrl.Close()
	var pids []int
	line, err := wire.ReadLine(br, wire.MaxLine)
	if err == nil {
		var said struct {
			Env    []string      `json:"env"`
			Script scriptVerdict `json:"script"`
		}
		if err = json.Unmarshal(line, &said); err == nil {
			f.started, f.script = said.Env, said.Script
		}
	}
	close(f.startedRead)
	if err == nil {
		if line, err = wire.ReadLine(br, wire.MaxLine); err == nil {
			err = json.Unmarshal(line, &pids)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.forks, f.pid)
	for i, sl := range f.slots {
		if err == nil && i < len(pids) && pids[i] > 0 {
			sl.pid = pids[i]
			p.byPID[sl.pid] = sl
			if ws, ok := p.early[sl.pid]; ok {
				delete(p.early, sl.pid)
				sl.ended(ws)
			}
			if sl.unwanted {
				sl.killForked()
			}
		} else {
			sl.ctrl.Close()
			sl.ended(unix.WaitStatus(syscall.SIGKILL))
		}
		close(sl.forked)
	}
	if len(p.forks) == 0 {
		clear(p.early) // no pid is left to name
	}
}

// ended records the slot's end; under pool.mu.
func (sl *poolSlot) ended(ws unix.WaitStatus) {
	select {
	case <-sl.gone:
	default:
		sl.status = ws
		close(sl.gone)
	}
}

// reaped is the reaper's word on a child that is not the job's main
// process.
func (p *pool) reaped(pid int, ws unix.WaitStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sl := p.byPID[pid]; sl != nil {
		delete(p.byPID, pid)
		sl.ended(ws)
		return
	}
	if _, ok := p.forks[pid]; !ok && len(p.forks) > 0 {
		p.early[pid] = ws // a slot's, maybe, forked but not yet named
	}
}

// dropIdle kills every interpreter not claimed, and the fork servers
// still importing, and waits until they are reaped (at most a second): the
// job is over, or starts without them.
func (p *pool) dropIdle() {
	if p == nil {
		return
	}
	idle := p.killIdle()
	deadline := time.After(time.Second)
	for _, sl := range idle {
		select {
		case <-sl.gone:
		case <-deadline:
			return
		}
	}
}

// killIdle kills every interpreter not claimed, and the fork servers still
// importing, and returns the slots it killed.
func (p *pool) killIdle() []*poolSlot {
	p.mu.Lock()
	var idle []*poolSlot
	for i, sl := range p.slots {
		if sl != nil {
			idle = append(idle, sl)
			p.slots[i] = nil
		}
	}
	for pid := range p.forks {
		_ = unix.Kill(-pid, syscall.SIGKILL) // its own session and group
	}
	p.mu.Unlock()
	for _, sl := range idle {
		p.kill(sl)
	}
	return idle
}

// kill kills the slot's interpreter, now or, before it is forked, once
// it is.
func (p *pool) kill(sl *poolSlot) {
	sl.ctrl.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sl.pid == 0 {
		sl.unwanted = true
		return
	}
	sl.killForked()
}

func (sl *poolSlot) killForked() {
	_ = unix.Kill(-sl.pid, syscall.SIGKILL) // its own group
	_ = unix.Kill(sl.pid, syscall.SIGKILL)
}

// abandon ends the pool as the job is being stopped by sig. Every
// supervisor still waiting for its interpreter, and every one that asks
// later, is told that its worker is not to start (stopReply). The
// interpreters no worker took yet are killed, not left to the stop's
// signal: they hold SIGINT until a script runs. It does not wait for them
// to be reaped.
func (p *pool) abandon(sig syscall.Signal) {
	if p != nil {
		p.stopOnce.Do(func() {
			p.stopSig = sig
			close(p.stopped)
		})
		p.killIdle()
	}
}

// stopReply is the answer to a supervisor once abandon has run: its
// worker is not to start. The supervisor hears the stop otherwise only
// once its worker runs, and a stop's SIGINT that lands in a worker's
// import of torch may be lost (Python prints "Exception ignored" and goes
// on), leaving the worker to the end of the grace.
func (p *pool) stopReply() (wire.PoolReply, bool) {
	select {
	case <-p.stopped:
		return wire.PoolReply{Cold: "the job was stopped before its worker started", Stopped: int(p.stopSig)}, true
	default:
		return wire.PoolReply{}, false
	}
}

// close stops taking workers, kills the interpreters left and waits for
// the supervisors' connections to end (their workers are gone when the
// agent calls this).
func (p *pool) close() {
	if p == nil {
		return
	}
	p.ln.Close()
	p.dropIdle()
	p.conns.Wait()
}

func (p *pool) accept() {
	defer p.conns.Done()
	for {
		c, err := p.ln.AcceptUnix()
		if err != nil {
			return
		}
		p.conns.Add(1)
		go func() {
			defer p.conns.Done()
			defer c.Close()
			p.serve(c)
		}()
	}
}

// serve answers one supervisor: it hands its worker to the slot's
// interpreter when the worker fits it, and then, once the interpreter is
// forked, reports the worker's end, or kills the worker if the supervisor
// hangs up first.
func (p *pool) serve(c *net.UnixConn) {
	take, files, err := readTake(c)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	reply := func(r wire.PoolReply) error {
		b, _ := json.Marshal(r)
		_, err := c.Write(append(b, '\n'))
		return err
	}
	if err != nil {
		_ = reply(wire.PoolReply{Cold: "bad request to the pool: " + err.Error()})
		return
	}
	sl, why := p.claim(take)
	if why != "" {
		if r, ok := p.stopReply(); ok {
			_ = reply(r) // claim found no slot: abandon killed those not taken
			return
		}
		_ = reply(wire.PoolReply{Cold: why})
		return
	}
	if err := sl.hand(take, files); err != nil {
		p.kill(sl)
		_ = reply(wire.PoolReply{Cold: "hand-off to the pooled interpreter: " + err.Error()})
		return
	}
	for _, f := range files {
		f.Close()
	}
	files = nil
	hungUp := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, c)
		close(hungUp)
	}()
	// The worker's pid, once its fork server is done importing.
	waited := time.NewTimer(p.wait)
	defer waited.Stop() // a take mostly ends long before: no timer left behind it
	select {
	case <-sl.forked:
		if r, ok := p.stopReply(); ok {
			// Forked as the stop came (select chose): the stop wins, the
			// same every time.
			p.kill(sl)
			_ = reply(r)
			return
		}
	case <-hungUp:
		p.kill(sl) // the supervisor is gone (killed): nothing of its worker may outlive it
		return
	case <-waited.C:
		p.kill(sl)
		_ = reply(wire.PoolReply{Cold: fmt.Sprintf("the pool was still importing %v after the worker came", p.wait)})
		return
	case <-p.stopped:
		p.kill(sl)
		r, _ := p.stopReply()
		_ = reply(r)
		return
	}
	p.mu.Lock()
	pid := sl.pid
	p.mu.Unlock()
	if pid == 0 {
		_ = reply(wire.PoolReply{Cold: "the pool's interpreter ended before it forked the worker's"})
		return
	}
	if err := reply(wire.PoolReply{PID: pid}); err != nil {
		p.kill(sl)
		return
	}
	select {
	case <-sl.gone:
		st := int(sl.status)
		_ = reply(wire.PoolReply{Status: &st})
	case <-hungUp:
		p.kill(sl)
	}
}

// claim takes take's slot for it, or says why the worker cannot use it;
// a slot whose worker went elsewhere is killed, freeing its memory.
func (p *pool) claim(take wire.PoolTake) (*poolSlot, string) {
	p.mu.Lock()
	if p.off != "" {
		p.mu.Unlock()
		return nil, p.off
	}
	if take.Slot < 0 || take.Slot >= len(p.slots) || p.slots[take.Slot] == nil {
		p.mu.Unlock()
		return nil, fmt.Sprintf("no pooled interpreter for local rank %d", take.Slot)
	}
	sl := p.slots[take.Slot]
	p.slots[take.Slot] = nil // ours now: dropIdle no longer sees it
	p.mu.Unlock()
	// Outside the lock: fits may wait for a fork server that is still
	// starting, and the reaper must not wait with it. First: a fork server
	// whose script says its workers start cold forks no slot, and that
	// reason is the one to say.
	if why := sl.fits(take, p); why != "" {
		p.kill(sl)
		return nil, why
	}
	select {
	case <-sl.gone:
		return nil, fmt.Sprintf("the pooled interpreter ended before its worker came (%s)", waitStatusWords(sl.status))
	default:
	}
	return sl, ""
}

// fits says why take cannot run in the slot's interpreter, "" when it
// can: the same interpreter, folder and CPUs, and the same value of every
// variable read at import but the late ones. A variable that Python set
// or changed as the interpreter started (LC_CTYPE, coercing a C locale)
// matches the value it was started with: a worker started cold from
// that value would have done the same.
func (sl *poolSlot) fits(take wire.PoolTake, p *pool) string {
	switch {
	case take.Interp != p.interp:
		return fmt.Sprintf("the worker's interpreter is %s, the pool's %s", take.Interp, p.interp)
	case filepath.Clean(take.Dir) != filepath.Clean(p.dir):
		return "the worker's working directory differs from the pool's"
	case !slices.Equal(take.CPUs, sl.cpus):
		return "the worker's CPU binding differs from the pool's"
	}
	env, err := sl.fork.startedEnv()
	if err != nil {
		return "the pooled interpreter did not start: " + err.Error()
	}
	if why := sl.fork.script.cold(take, p.learnedOnce); why != "" {
		return why
	}
	given, want := envMap(sl.fork.env), envMap(take.Env)
	for _, name := range changedVars(env, take.Env) {
		if name == wire.RelaySocketVar || name == wire.PoolSocketVar || !importTimeVar(name) || lateVar(p.late, name) {
			continue
		}
		if g, ok := given[name]; ok == hasKey(want, name) && g == want[name] {
			continue
		}
		return fmt.Sprintf("%s, read at import time, differs from the pool's", name)
	}
	return ""
}

// becomes is the environment the worker runs with: take's, and what
// Python set as the interpreter started where take has nothing else,
// as it would have set it for the worker started cold.
func (sl *poolSlot) becomes(take wire.PoolTake) []string {
	given, want := envMap(sl.fork.env), envMap(take.Env)
	out := slices.Clone(take.Env)
	for _, kv := range sl.fork.started {
		k, _, _ := strings.Cut(kv, "=")
		if k == wire.RelaySocketVar || k == wire.PoolSocketVar || k == wire.GateVar {
			continue // torchrun's, where it is the fork server: a cold worker's supervisor drops them
		}
		if !hasKey(given, k) && !hasKey(want, k) {
			out = append(out, kv)
		}
	}
	return out
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// startedEnv is the environment the fork server sent as it started
// (warm.py), waiting for it at most poolHandTimeout.
func (f *poolFork) startedEnv() ([]string, error) {
	select {
	case <-f.startedRead:
	case <-time.After(poolHandTimeout):
		return nil, errors.New("it did not say its environment in time")
	}
	if f.started == nil {
		return nil, errors.New("it ended before it said its environment")
	}
	return f.started, nil
}

func lateVar(late []string, name string) bool {
	for _, l := range late {
		if l == name || (strings.HasSuffix(l, "*") && strings.HasPrefix(name, l[:len(l)-1])) {
			return true
		}
	}
	return false
}

// hand gives the interpreter its worker, with its streams.
func (sl *poolSlot) hand(take wire.PoolTake, files []*os.File) error {
	// A cold start's argv, `python -u [-m] TARGET ARGS`, for ps (warm.py
	// keeps its own argv[0]).
	shown := []string{take.Interp, "-u"}
	if take.Module {
		shown = append(shown, "-m")
	}
	shown = append(append(shown, take.Target), take.Args...)
	line, err := json.Marshal(struct {
		Env    []string `json:"env"`
		Dir    string   `json:"dir"`
		Args   []string `json:"args"`
		Mode   string   `json:"mode"`
		Target string   `json:"target"`
		Shown  []string `json:"shown"`
	}{sl.becomes(take), take.Dir, take.Args, map[bool]string{false: "script", true: "module"}[take.Module], take.Target, shown})
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_ = sl.ctrl.SetWriteDeadline(time.Now().Add(poolHandTimeout))
	err = wire.WriteWithRights(sl.ctrl, append(line, '\n'), unix.UnixRights(fds...))
	sl.ctrl.Close()
	return err
}

// readTake reads a supervisor's request: one JSON line, with the worker's
// stdin, stdout and stderr passed along it.
func readTake(c *net.UnixConn) (wire.PoolTake, []*os.File, error) {
	var take wire.PoolTake
	var files []*os.File
	_ = c.SetReadDeadline(time.Now().Add(poolHandTimeout))
	defer c.SetReadDeadline(time.Time{})
	var line []byte
	buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(8*4))
	for !bytes.HasSuffix(line, []byte("\n")) {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				if fds, err := unix.ParseUnixRights(&m); err == nil {
					for _, fd := range fds {
						files = append(files, os.NewFile(uintptr(fd), "worker"))
					}
				}
			}
			if perr != nil {
				return take, files, perr
			}
		}
		if n > 0 { // -1 with a deadline's error
			line = append(line, buf[:n]...)
		}
		if len(line) > wire.MaxLine {
			return take, files, errors.New("request too long")
		}
		if err != nil {
			return take, files, err
		}
		if n == 0 {
			return take, files, io.ErrUnexpectedEOF
		}
	}
	if len(files) != 3 {
		return take, files, fmt.Errorf("%d streams passed, want 3", len(files))
	}
	return take, files, json.Unmarshal(line, &take)
}

// waitStatusWords says how a reaped process ended.
func waitStatusWords(ws unix.WaitStatus) string {
	if ws.Exited() {
		return fmt.Sprintf("exit %d", ws.ExitStatus())
	}
	return fmt.Sprintf("signal %d", ws.Signal())
}

// usableCPUs is how many CPUs this process may run on; 0 when unknown.
func usableCPUs() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return 0
	}
	return set.Count()
}

// besideWindow is how long autoPoolOff watches the CPUs before it starts
// the next attempt's pool beside a running attempt.
const besideWindow = 300 * time.Millisecond

// autoPoolOff says why --prewarm auto starts no pool (of imports fork
// servers, one import each) on a node with cpus CPUs ("": start it). A
// launch's pool imports beside torchrun's own import: it needs a CPU for
// each import and one for torchrun's. The next attempt's pool (beside >
// 0) imports while the attempt's beside workers run and the standby
// torchrun imports: it starts only where the CPUs left idle while they do
// (idle, measured over besideWindow from the standby's start) hold its
// imports, whatever the workers' number: a GPU job's workers leave their
// CPUs mostly idle, a CPU job's keep them busy, and nodes that share their
// CPUs (containers, the test cluster's namespaces) see each other's
// imports. An import there would only slow the running training, and a
// crash during it would wait.
func autoPoolOff(cpus, imports, beside int, idle func(time.Duration) (float64, error)) string {
	what := "1 pooled import"
	if imports > 1 {
		what = fmt.Sprintf("%d pooled imports", imports)
	}
	if cpus > 0 && cpus < imports+1 {
		return fmt.Sprintf("--prewarm auto: %d CPUs here for %s and torchrun's, which would only slow each other (--prewarm torch starts the pool anyway)", cpus, what)
	}
	if beside == 0 {
		return ""
	}
	free, err := idle(besideWindow)
	if err != nil {
		return "" // unknown: as --prewarm torch
	}
	// An import keeps most of a CPU busy: a quarter of one less is room enough.
	if free+0.25 < float64(imports) {
		return fmt.Sprintf("--prewarm auto: %.1f of %d CPUs idle here beside %d running workers and the standby torchrun's import, too few for %s (--prewarm torch starts the pool anyway)", free, cpus, beside, what)
	}
	return ""
}

// idleCPUs is how many of the CPUs this process may run on were idle
// over window, from the whole machine's /proc/stat: busy CPUs of other
// processes, other containers' and other jobs' included.
func idleCPUs(window time.Duration) (float64, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, err
	}
	before, err := cpuTicks(&set)
	if err != nil {
		return 0, err
	}
	time.Sleep(window)
	after, err := cpuTicks(&set)
	if err != nil {
		return 0, err
	}
	return idleShare(before, after) * float64(set.Count()), nil
}

// ticks are one moment's CPU time of a set of CPUs, in clock ticks.
type ticks struct{ idle, total uint64 }

// idleShare is the share of the CPUs' time that was idle between two
// moments.
func idleShare(before, after ticks) float64 {
	if after.total <= before.total || after.idle < before.idle {
		return 0 // a CPU gone offline, or iowait counted back (it may be): unknown, so none
	}
	return float64(after.idle-before.idle) / float64(after.total-before.total)
}

// cpuTicks sums /proc/stat's lines of the CPUs in set: idle and iowait
// are idle; user, nice, system, irq, softirq and steal are busy (guest
// time is counted in user already).
func cpuTicks(set *unix.CPUSet) (ticks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return ticks{}, err
	}
	return parseCPUTicks(string(b), set)
}

// parseCPUTicks is cpuTicks on /proc/stat's text.
func parseCPUTicks(stat string, set *unix.CPUSet) (ticks, error) {
	var t ticks
	seen := 0
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || !set.IsSet(n) {
			continue
		}
		for i, v := range f[1:9] {
			x, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return ticks{}, fmt.Errorf("/proc/stat: %q: %w", line, err)
			}
			t.total += x
			if i == 3 || i == 4 { // idle, iowait
				t.idle += x
			}
		}
		seen++
	}
	if seen == 0 {
		return ticks{}, errors.New("/proc/stat: no line for this process's CPUs")
	}
	return t, nil
}
