package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
)

// gpuFreePoll is how often the teardown check asks NVML again while it
// waits for the job's memory to be freed: NVML has nothing to wait on.
const gpuFreePoll = 100 * time.Millisecond

// maxCommand is how many characters of a process's command line the
// answer shows.
const maxCommand = 200

// RunGPUFree answers `gorun _gpufree REQUEST` on a node (the teardown
// check before a restart): the request is a wire.GPUFreeRequest as JSON,
// the answer a wire.GPUFreeAnswer as JSON on stdout. With "-" for the
// request, NVML is loaded and initialised first and the request is read
// from stdin, one line: an agent on standby starts it so ahead of the ask
// (wire.Job.AskAhead), and the check then costs only its listing.
func RunGPUFree(ctx context.Context, arg string, stdin io.Reader, stdout io.Writer) error {
	lib := nvml.New()
	if arg == "-" {
		if nvmlDo(lib.Init) == nvml.SUCCESS {
			defer nvmlDo(lib.Shutdown) // gpuCheck's own Init and Shutdown count on this one
		}
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil {
			return fmt.Errorf("%s -: no request on stdin: %w", wire.GPUFreeCommand, err)
		}
		arg = line
	}
	return runGPUFree(ctx, arg, stdout, lib, hostProcs())
}

func runGPUFree(ctx context.Context, arg string, stdout io.Writer, lib nvml.Interface, p procs) error {
	var req wire.GPUFreeRequest
	if err := json.Unmarshal([]byte(arg), &req); err != nil {
		return fmt.Errorf("%s: bad request: %w", wire.GPUFreeCommand, err)
	}
	return json.NewEncoder(stdout).Encode(gpuFree(ctx, req, lib, p))
}

// procs is what the teardown check reads of this machine's processes,
// and what it does to them.
type procs struct {
	// read returns the file name of /proc/PID.
	read func(pid int, name string) ([]byte, error)
	// kill sends pid SIGKILL if stillJob, asked once pid is pinned down,
	// says it is still the job's; sent says whether a signal went.
	kill func(pid int, stillJob func() bool) (sent bool, err error)
	// self is this process, never the job's.
	self int
	// pids lists every process's PID (for a sweep).
	pids func() []int
}

func hostProcs() procs {
	return procs{read: readProc, kill: killJob, self: os.Getpid(), pids: listPIDs}
}

// listPIDs lists every process of this PID namespace.
func listPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sweep SIGKILLs every process of the job (GPUFreeRequest.Sweep) and
// returns those it sent the signal to, with what it could not kill.
func sweep(req wire.GPUFreeRequest, p procs) (killed []wire.GPUProcess, errs []string) {
	if p.pids == nil {
		return nil, nil
	}
	for _, pid := range p.pids() {
		if !p.isJob(pid, req) {
			continue
		}
		cmd := p.command(pid)
		sent, err := p.kill(pid, func() bool { return p.isJob(pid, req) })
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("kill PID %d %s: %v", pid, cmd, err))
		case sent:
			killed = append(killed, wire.GPUProcess{PID: pid, Command: cmd, Job: true, Killed: true})
		}
	}
	return killed, errs
}

func readProc(pid int, name string) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + name)
}

// killJob SIGKILLs pid through a pidfd, so that a PID reused between the
// check and the signal cannot take the signal: stillJob is asked once the
// pidfd holds the process. A process already gone is no error. Where
// pidfds are missing (Linux before 5.3, or a seccomp filter that refuses
// them) it falls back to kill(2) right after the check.
func killJob(pid int, stillJob func() bool) (bool, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return false, nil
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		if !stillJob() {
			return false, nil
		}
		return sent(unix.Kill(pid, unix.SIGKILL))
	case err != nil:
		return false, err
	}
	defer unix.Close(fd)
	if !stillJob() {
		return false, nil
	}
	return sent(unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0))
}

func sent(err error) (bool, error) {
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	return err == nil, err
}

// isJob says whether pid's environment holds the request's marker. A
// process whose environment cannot be read (another user's, one gone) is
// not the job's.
func (p procs) isJob(pid int, req wire.GPUFreeRequest) bool {
	if req.Var == "" || pid == p.self {
		return false
	}
	env, err := p.read(pid, "environ")
	if err != nil {
		return false
	}
	want := []byte(req.Var + "=" + req.Value)
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// command is pid's command line as the answer shows it: arguments joined
// by spaces, cut to maxCommand characters, control characters escaped;
// "" when it cannot be read.
func (p procs) command(pid int) string {
	b, err := p.read(pid, "cmdline")
	if err != nil {
		return ""
	}
	s := strings.ToValidUTF8(strings.TrimRight(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), " "), "\uFFFD")
	if utf8.RuneCountInString(s) > maxCommand {
		s = string([]rune(s)[:maxCommand]) + "…"
	}
	return escapeCommand(s)
}

// escapeCommand writes each character a terminal could act on (a control,
// a line break, a bidi override) as an escape.
func escapeCommand(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf && userr.UnsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case userr.UnsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// gpuFree is the teardown check: list every GPU's processes, SIGKILL the
// job's that hold memory (the agent has torn the job's tree down, so
// these escaped it), and list again every gpuFreePoll until none of the
// job's holds any, or the request's timeout passes, or ctx ends. Others'
// processes are reported and left alone. With req.Sweep, every process of
// the job on the node is killed first, on a GPU or not, NVML or not.
func gpuFree(ctx context.Context, req wire.GPUFreeRequest, lib nvml.Interface, p procs) wire.GPUFreeAnswer {
	if !req.Sweep {
		return gpuCheck(ctx, req, lib, p, nil)
	}
	swept, errs := sweep(req, p)
	ans := gpuCheck(ctx, req, lib, p, swept)
	ans.Swept, ans.Errors = swept, append(errs, ans.Errors...)
	return ans
}

// gpuCheck is the teardown check of the GPUs (gpuFree without a sweep).
// swept are the job's processes the sweep has just killed: the job's
// while they last, though a dying process's environment can no longer be
// read, so the check waits for their memory too.
func gpuCheck(ctx context.Context, req wire.GPUFreeRequest, lib nvml.Interface, p procs, swept []wire.GPUProcess) wire.GPUFreeAnswer {
	if ret := nvmlDo(lib.Init); ret != nvml.SUCCESS {
		return wire.GPUFreeAnswer{NoGPUs: true, Reason: "NVML does not load: " + ret.Error(), Free: true}
	}
	defer nvmlDo(lib.Shutdown)
	n, ret := nvmlGet(lib.DeviceGetCount)
	switch {
	case ret != nvml.SUCCESS:
		return wire.GPUFreeAnswer{Free: true, Errors: []string{"count the GPUs: " + ret.Error()}}
	case n == 0:
		return wire.GPUFreeAnswer{NoGPUs: true, Reason: "NVML sees no GPU", Free: true}
	}
	c := &teardown{req: req, procs: p, lib: lib, judged: map[int]bool{}, kills: map[int]bool{}}
	for _, s := range swept {
		c.judged[s.PID], c.kills[s.PID] = true, true
	}
	for i := range n {
		d, ret := nvmlGet(func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByIndex(i) })
		if ret != nvml.SUCCESS {
			c.fail(fmt.Sprintf("GPU %d: %s", i, ret.Error()))
			continue
		}
		g := gpuSeen{dev: d, out: wire.GPUProcesses{Index: i}, at: map[int]int{}}
		if uuid, ret := nvmlGet(d.GetUUID); ret == nvml.SUCCESS {
			g.out.UUID = uuid
		}
		c.gpus = append(c.gpus, &g)
	}

	start := time.Now()
	wctx, cancel := context.WithDeadline(ctx, start.Add(req.Timeout()))
	defer cancel()
	tick := time.NewTicker(gpuFreePoll)
	defer tick.Stop()
	ans := wire.GPUFreeAnswer{}
	held := c.look()
	waited := held > 0
	for held > 0 && wctx.Err() == nil {
		select {
		case <-wctx.Done():
		case <-tick.C:
		}
		held = c.look()
	}
	if waited {
		ans.Waited = time.Since(start)
	}
	ans.Free = held == 0
	for _, g := range c.gpus {
		ans.GPUs = append(ans.GPUs, g.out)
	}
	ans.Errors = c.errs
	return ans
}

// teardown is one check's state.
type teardown struct {
	req    wire.GPUFreeRequest
	procs  procs
	lib    nvml.Interface
	gpus   []*gpuSeen
	judged map[int]bool // PID: the job's
	kills  map[int]bool // PID of the job's, once the check tried to kill it: SIGKILL sent
	errs   []string
}

// gpuSeen is one GPU and what the check saw there.
type gpuSeen struct {
	dev nvml.Device
	out wire.GPUProcesses
	at  map[int]int // PID: its index in out.Processes
}

func (c *teardown) fail(msg string) {
	for _, e := range c.errs {
		if e == msg {
			return
		}
	}
	c.errs = append(c.errs, msg)
}

// look lists every GPU's processes once, notes the new ones, kills the
// job's that hold memory and were not killed yet, and returns how many of
// the job's held memory in this listing (on every GPU, a process counted
// once per GPU).
func (c *teardown) look() int {
	held := 0
	for _, g := range c.gpus {
		for i := range g.out.Processes {
			g.out.Processes[i].Held = false
		}
		ps, ret := listProcesses(g.dev)
		if ret != nvml.SUCCESS {
			c.fail(fmt.Sprintf("GPU %d: list its processes: %s", g.out.Index, ret.Error()))
			continue
		}
		for _, p := range ps {
			pid := int(p.Pid)
			e := c.note(g, pid)
			if mib := memoryMiB(p.UsedGpuMemory); e.MemoryMiB == 0 || mib > e.MemoryMiB {
				e.MemoryMiB = mib
			}
			if p.UsedGpuMemory == 0 {
				continue
			}
			e.Held = true
			if !e.Job {
				continue
			}
			held++
			if _, tried := c.kills[pid]; !tried {
				sent, err := c.procs.kill(pid, func() bool { return c.procs.isJob(pid, c.req) })
				if err != nil {
					c.fail(fmt.Sprintf("kill PID %d: %v", pid, err))
				}
				c.kills[pid] = sent
				if sent {
					c.killed(pid)
				}
			}
		}
	}
	return held
}

// note returns pid's entry on g, made on first sight: whose it is and
// what it runs.
func (c *teardown) note(g *gpuSeen, pid int) *wire.GPUProcess {
	if i, ok := g.at[pid]; ok {
		return &g.out.Processes[i]
	}
	job, ok := c.judged[pid]
	if !ok {
		job = c.procs.isJob(pid, c.req)
		c.judged[pid] = job
	}
	cmd := c.procs.command(pid)
	if cmd == "" { // not ours to read: NVML's name for it
		name, _ := nvmlGet(func() (string, nvml.Return) { return c.lib.SystemGetProcessName(pid) })
		cmd = escapeCommand(name)
	}
	g.at[pid] = len(g.out.Processes)
	g.out.Processes = append(g.out.Processes, wire.GPUProcess{PID: pid, Command: cmd, Job: job, Killed: c.kills[pid]})
	return &g.out.Processes[len(g.out.Processes)-1]
}

// killed marks pid killed on every GPU it was seen on.
func (c *teardown) killed(pid int) {
	for _, g := range c.gpus {
		if i, ok := g.at[pid]; ok {
			g.out.Processes[i].Killed = true
		}
	}
}

// listProcesses is a GPU's compute processes and its graphics processes,
// a process listed twice merged into one; only a failure to list the
// compute processes is an error (graphics is not supported everywhere).
func listProcesses(d nvml.Device) ([]nvml.ProcessInfo, nvml.Return) {
	ps, ret := nvmlGet(d.GetComputeRunningProcesses)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	graphics, ret := nvmlGet(d.GetGraphicsRunningProcesses)
	if ret != nvml.SUCCESS {
		return ps, nvml.SUCCESS
	}
	for _, gp := range graphics {
		merged := false
		for i := range ps {
			if ps[i].Pid == gp.Pid {
				ps[i].UsedGpuMemory = moreMemory(ps[i].UsedGpuMemory, gp.UsedGpuMemory)
				merged = true
			}
		}
		if !merged {
			ps = append(ps, gp)
		}
	}
	return ps, nvml.SUCCESS
}

// notAvailable is NVML's UsedGpuMemory when it cannot tell (some
// containers, some drivers): the process counts as holding memory.
const notAvailable = math.MaxUint64

func moreMemory(a, b uint64) uint64 {
	switch {
	case a == notAvailable:
		return b
	case b == notAvailable:
		return a
	}
	return max(a, b)
}

func memoryMiB(used uint64) int64 {
	if used == notAvailable {
		return -1
	}
	return int64(used >> 20)
}

// nvmlGet runs one NVML query. go-nvml's mocks panic on a method with no
// implementation, and some drivers lack some calls: a panic reads as
// ERROR_NOT_SUPPORTED.
func nvmlGet[T any](fn func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return fn()
}

func nvmlDo(fn func() nvml.Return) nvml.Return {
	_, ret := nvmlGet(func() (struct{}, nvml.Return) { return struct{}{}, fn() })
	return ret
}
