package sshexec

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
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The worker pool (Job.Pool): Python interpreters the agent starts beside
// the job, one per slot, their imports done, each waiting for a worker to
// become. A worker's supervisor takes its slot's interpreter through the
// socket that PoolSocketVar names (TakePooled): it hands over the
// worker's environment, folder, script and streams, and the interpreter
// becomes the worker. The interpreter stays the agent's child, so the
// agent reaps it and tells the supervisor how it ended; the supervisor
// signals it, and when the supervisor hangs up first the agent kills it.

// PoolSocketVar names, in a pooled job's environment, the unix socket on
// which a worker's supervisor takes its interpreter.
const PoolSocketVar = "GORUN_POOL_SOCK"

// Pool asks the agent of a relayed job for interpreters started ahead.
type Pool struct {
	// Modules are imported by every interpreter before it waits.
	Modules []string `json:"modules"`
	// Slots are the interpreters, one per worker (slot i for local rank
	// i).
	Slots []PoolSlot `json:"slots"`
	// Late names the variables the job's main process sets for each
	// worker after the pool has started, which neither Python nor the
	// modules read at import (torchrun's TORCHELASTIC_RESTART_COUNT); a
	// name ending in '*' stands for every name it begins. A difference
	// in any other import-time variable keeps the worker out of the pool.
	Late []string `json:"late,omitempty"`
	// Auto (--prewarm auto): no interpreter starts on a node with fewer
	// CPUs than the interpreters plus torchrun, where their imports would
	// only share the CPUs with torchrun's own and with each other (a start
	// or a restart then takes longer than cold); every worker there is
	// told why and starts cold.
	Auto bool `json:"auto,omitempty"`
}

// PoolSlot is one interpreter of a pool.
type PoolSlot struct {
	// Env is set in the interpreter's environment, on top of the job's.
	Env map[string]string `json:"env,omitempty"`
	// Default is set unless the job's environment has the name already
	// (the variables the job's main process sets only when unset).
	Default map[string]string `json:"default,omitempty"`
	// CPUs binds the interpreter, before its imports; none: unbound.
	CPUs []int `json:"cpus,omitempty"`
}

// PoolTake is what a worker's supervisor asks of the pool: the worker as
// it would start it.
type PoolTake struct {
	Slot   int      `json:"slot"`
	Interp string   `json:"interp"` // the interpreter, as a path
	Module bool     `json:"module"` // Target is a module (-m)
	Target string   `json:"target"` // the script or the module
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"` // absolute
	CPUs   []int    `json:"cpus,omitempty"`
}

// poolRoom is the room, in bytes, each pooled interpreter starts with
// beyond its own command line and environment (an argument of spaces, a
// variable of dots), which its worker's, written over them, may use: a
// worker then shows its own in ps, pgrep -f and /proc/PID/cmdline and
// environ, as a cold start's would.
const poolRoom = 4096

// PoolRoomVar is the variable that holds a pooled interpreter's room in
// its environment; warm.py drops it before anything reads the
// environment.
const PoolRoomVar = "GORUN_POOL_ROOM"

// poolReply is the agent's answer to a PoolTake, and later its word on
// the worker's end.
type poolReply struct {
	PID    int    `json:"pid,omitempty"`
	Cold   string `json:"cold,omitempty"`   // why the worker cannot be pooled
	Status *int   `json:"status,omitempty"` // the worker's raw wait status, once reaped
}

// poolHandTimeout bounds a supervisor's request and the hand-off.
const poolHandTimeout = 2 * time.Second

// pool is the agent's side of Job.Pool.
type pool struct {
	ln     *net.UnixListener
	interp string
	dir    string
	late   []string
	logf   func(format string, args ...any)
	off    string // why no interpreter was started (Pool.Auto); "": they were

	mu    sync.Mutex
	slots []*poolSlot
	byPID map[int]*poolSlot
	conns sync.WaitGroup
}

type poolSlot struct {
	pid int
	env []string // as the agent started it
	// started is its environment as the interpreter has it, once it
	// said (Python may set LC_CTYPE as it starts); nil until read.
	started []string
	cpus    []int
	ctrl    *net.UnixConn // the interpreter's fd 3, our end
	gone    chan struct{} // closed once reaped
	status  unix.WaitStatus
}

// startPool starts job's pool with its socket in dir; it must be called
// from the agent's locked thread (the interpreters' parent-death signal is
// tied to it), before the reaper that passes them to reaped runs. The
// error says why no pool could start; the job runs without one.
func startPool(job Job, dir string, logf func(string, ...any)) (*pool, error) {
	base, err := mergeEnv(withoutStepVars(os.Environ()), job.Env)
	if err != nil {
		return nil, err
	}
	interp := envValue(base, "PYTHON_EXEC") // torchrun's own rule for its workers
	if interp == "" {
		prog, err := pythonProgram(job.Argv, base, job.Dir)
		if err != nil {
			return nil, err
		}
		interp = prog.interp[0]
	}
	if interp, err = lookPath(interp, envValue(base, "PATH"), job.Dir); err != nil {
		return nil, err
	}
	wd := job.Dir
	if wd == "" {
		if wd, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(dir, "pool")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	p := &pool{ln: ln, interp: interp, dir: wd, late: job.Pool.Late, logf: logf, byPID: map[int]*poolSlot{}}
	if n := len(job.Pool.Slots); job.Pool.Auto && n > 0 {
		if cpus := usableCPUs(); cpus > 0 && cpus < n+1 {
			p.off = fmt.Sprintf("--prewarm auto: %d CPUs here for %d pooled imports and torchrun's, which would only slow each other (--prewarm torch starts the pool anyway)", cpus, n)
		}
	}
	p.mu.Lock()                               // the reaper waits until each interpreter is known
	failed, failedAt, started := "", 0, false // the first interpreter's failure, its slot; whether one started
	for i, s := range job.Pool.Slots {
		if p.off != "" {
			p.slots = append(p.slots, nil)
			continue
		}
		sl, err := p.startSlot(job, base, s, dir, i)
		switch {
		case err != nil && failed == "":
			failed, failedAt = err.Error(), i
		case err != nil:
			logf("pool: interpreter for slot %d: %v", i, err)
		case sl != nil:
			started = true
		}
		p.slots = append(p.slots, sl) // nil: none for this slot
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

// noPool answers every supervisor at path that its worker starts cold,
// and why; nil when it cannot listen there.
func noPool(path, why string, logf func(string, ...any)) *pool {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil
	}
	p := &pool{ln: ln, off: why, logf: logf, byPID: map[int]*poolSlot{}}
	p.conns.Add(1)
	go p.accept()
	return p
}

// startSlot forks slot i's interpreter, with a shim of its own in dir
// (the relay's private folder, which goes with the agent), removed once
// read.
func (p *pool) startSlot(job Job, base []string, s PoolSlot, dir string, i int) (*poolSlot, error) {
	shim := filepath.Join(dir, fmt.Sprintf("warm-%d.py", i))
	if err := os.WriteFile(shim, []byte(warmPy), 0o600); err != nil {
		return nil, err
	}
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
		return k == RelaySocketVar || k == PoolSocketVar
	})
	settings, err := json.Marshal(struct {
		CPUs    []int    `json:"cpus,omitempty"`
		Signals []int    `json:"signals,omitempty"`
		Modules []string `json:"modules"`
	}{s.CPUs, job.PassSignals, job.Pool.Modules})
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "pool"), os.NewFile(uintptr(fds[1]), "pool")
	defer theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	sl := &poolSlot{env: env, cpus: s.CPUs, ctrl: c.(*net.UnixConn), gone: make(chan struct{})}
	// What it prints while it imports, it holds, and writes to the
	// worker's streams once it has them (warm.py).
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		c.Close()
		return nil, err
	}
	defer devnull.Close()
	argv := []string{p.interp, "-u", shim, "pool", string(settings), strings.Repeat(" ", poolRoom)}
	withRoom := append(slices.Clip(env), PoolRoomVar+"="+strings.Repeat(".", poolRoom))
	started, err := forkExec(p.interp, argv, withRoom, p.dir, nil, devnull, devnull, theirs)
	if err != nil {
		err = fmt.Errorf("start %s: %w", p.interp, err)
		os.Remove(shim)
		c.Close()
		return nil, err
	}
	sl.pid = started.pid
	p.byPID[sl.pid] = sl
	return sl, nil
}

// reaped is the reaper's word on a child that is not the job's main
// process.
func (p *pool) reaped(pid int, ws unix.WaitStatus) {
	p.mu.Lock()
	sl := p.byPID[pid]
	if sl != nil {
		delete(p.byPID, pid)
		sl.status = ws
	}
	p.mu.Unlock()
	if sl != nil {
		close(sl.gone)
	}
}

// dropIdle kills every interpreter not claimed and waits until they are
// reaped (at most a second): the job is over, or starts without them.
func (p *pool) dropIdle() {
	if p == nil {
		return
	}
	p.mu.Lock()
	var idle []*poolSlot
	for i, sl := range p.slots {
		if sl != nil {
			idle = append(idle, sl)
			p.slots[i] = nil
		}
	}
	p.mu.Unlock()
	for _, sl := range idle {
		sl.kill()
	}
	deadline := time.After(time.Second)
	for _, sl := range idle {
		select {
		case <-sl.gone:
		case <-deadline:
			return
		}
	}
}

func (sl *poolSlot) kill() {
	sl.ctrl.Close()
	_ = unix.Kill(-sl.pid, syscall.SIGKILL) // its own session and group
	_ = unix.Kill(sl.pid, syscall.SIGKILL)
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
// interpreter when the worker fits it, and then reports the worker's end,
// or kills the worker if the supervisor hangs up first.
func (p *pool) serve(c *net.UnixConn) {
	take, files, err := readTake(c)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	reply := func(r poolReply) error {
		b, _ := json.Marshal(r)
		_, err := c.Write(append(b, '\n'))
		return err
	}
	if err != nil {
		_ = reply(poolReply{Cold: "bad request to the pool: " + err.Error()})
		return
	}
	sl, why := p.claim(take)
	if why != "" {
		_ = reply(poolReply{Cold: why})
		return
	}
	if err := sl.hand(take, files); err != nil {
		sl.kill()
		_ = reply(poolReply{Cold: "hand-off to the pooled interpreter: " + err.Error()})
		return
	}
	for _, f := range files {
		f.Close()
	}
	files = nil
	if err := reply(poolReply{PID: sl.pid}); err != nil {
		sl.kill()
		return
	}
	hungUp := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, c)
		close(hungUp)
	}()
	select {
	case <-sl.gone:
		st := int(sl.status)
		_ = reply(poolReply{Status: &st})
	case <-hungUp:
		// The supervisor is gone (killed): nothing of its worker may
		// outlive it.
		sl.kill()
	}
}

// claim takes take's slot for it, or says why the worker cannot use it;
// a slot whose worker went elsewhere is killed, freeing its memory.
func (p *pool) claim(take PoolTake) (*poolSlot, string) {
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
	select {
	case <-sl.gone:
		return nil, fmt.Sprintf("the pooled interpreter ended before its worker came (%s)", waitStatusWords(sl.status))
	default:
	}
	// Outside the lock: fits may wait for an interpreter that is still
	// starting, and the reaper must not wait with it.
	if why := sl.fits(take, p); why != "" {
		sl.kill()
		return nil, why
	}
	return sl, ""
}

// fits says why take cannot run in the slot's interpreter, "" when it
// can: the same interpreter, folder and CPUs, and the same value of every
// variable read at import but the late ones. A variable that Python set
// or changed as the interpreter started (LC_CTYPE, coercing a C locale)
// matches the value it was started with: a worker started cold from
// that value would have done the same.
func (sl *poolSlot) fits(take PoolTake, p *pool) string {
	switch {
	case take.Interp != p.interp:
		return fmt.Sprintf("the worker's interpreter is %s, the pool's %s", take.Interp, p.interp)
	case filepath.Clean(take.Dir) != filepath.Clean(p.dir):
		return "the worker's working directory differs from the pool's"
	case !slices.Equal(take.CPUs, sl.cpus):
		return "the worker's CPU binding differs from the pool's"
	}
	env, err := sl.startedEnv()
	if err != nil {
		return "the pooled interpreter did not start: " + err.Error()
	}
	given, want := envMap(sl.env), envMap(take.Env)
	for _, name := range changedVars(env, take.Env) {
		if name == RelaySocketVar || name == PoolSocketVar || !importTimeVar(name) || lateVar(p.late, name) {
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
func (sl *poolSlot) becomes(take PoolTake) []string {
	given, want := envMap(sl.env), envMap(take.Env)
	out := slices.Clone(take.Env)
	for _, kv := range sl.started {
		k, _, _ := strings.Cut(kv, "=")
		if !hasKey(given, k) && !hasKey(want, k) {
			out = append(out, kv)
		}
	}
	return out
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// startedEnv reads the environment the interpreter sent as it started
// (warm.py), waiting for it at most poolHandTimeout.
func (sl *poolSlot) startedEnv() ([]string, error) {
	if sl.started != nil {
		return sl.started, nil
	}
	_ = sl.ctrl.SetReadDeadline(time.Now().Add(poolHandTimeout))
	defer sl.ctrl.SetReadDeadline(time.Time{})
	line, err := bufio.NewReader(io.LimitReader(sl.ctrl, maxJobLine)).ReadBytes('\n') // nothing follows it
	if err == io.EOF {
		return nil, errors.New("it ended before it said its environment")
	}
	if err != nil {
		return nil, err
	}
	var env []string
	if err := json.Unmarshal(line, &env); err != nil {
		return nil, err
	}
	sl.started = env
	return env, nil
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
func (sl *poolSlot) hand(take PoolTake, files []*os.File) error {
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
	_, _, err = sl.ctrl.WriteMsgUnix(append(line, '\n'), unix.UnixRights(fds...), nil)
	sl.ctrl.Close()
	return err
}

// readTake reads a supervisor's request: one JSON line, with the worker's
// stdin, stdout and stderr passed along it.
func readTake(c *net.UnixConn) (PoolTake, []*os.File, error) {
	var take PoolTake
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
		line = append(line, buf[:n]...)
		if len(line) > maxJobLine {
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

// Pooled is a worker that runs in a pooled interpreter (TakePooled).
type Pooled struct {
	PID int
	c   *net.UnixConn
	br  *bufio.Reader
}

// TakePooled asks the pool at sock for slot take.Slot's interpreter to
// become the worker, with stdin, stdout and stderr as its streams. cold
// says why the worker cannot run there (the caller starts it itself); an
// error, that the pool could not be asked.
func TakePooled(sock string, take PoolTake, stdin, stdout, stderr *os.File) (p *Pooled, cold string, err error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, "", err
	}
	line, err := json.Marshal(take)
	if err != nil {
		c.Close()
		return nil, "", err
	}
	rights := unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	if _, _, err := c.WriteMsgUnix(append(line, '\n'), rights, nil); err != nil {
		c.Close()
		return nil, "", err
	}
	br := bufio.NewReader(c)
	r, err := readReply(br)
	switch {
	case err != nil:
		c.Close()
		return nil, "", err
	case r.Cold != "" || r.PID <= 0:
		c.Close()
		return nil, r.Cold, nil
	}
	return &Pooled{PID: r.PID, c: c, br: br}, "", nil
}

func readReply(br *bufio.Reader) (poolReply, error) {
	var r poolReply
	line, err := readLine(br, maxJobLine)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(line, &r)
}

// Wait waits for the worker's end and returns its wait status. When the
// agent is gone first (it was killed, and its interpreters with it),
// Wait reports a SIGKILL.
func (p *Pooled) Wait() unix.WaitStatus {
	defer p.c.Close()
	r, err := readReply(p.br)
	if err != nil || r.Status == nil {
		_ = unix.Kill(-p.PID, syscall.SIGKILL)
		return unix.WaitStatus(syscall.SIGKILL)
	}
	return unix.WaitStatus(*r.Status)
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
