package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gorun/gorun/internal/wire"
)

const mib = 1 << 20

// fakeProc is one process of a fake machine.
type fakeProc struct {
	environ, cmdline string // "" environ: not readable (another user's)
	// gpus: memory in bytes per GPU index it holds; graphics, the same
	// listed as a graphics process.
	gpus, graphics map[int]uint64
	stubborn       bool // survives SIGKILL (stuck in the driver)
	// lingers: once killed, its environment and command line cannot be
	// read, and it is still listed on its GPUs for this many looks.
	lingers int
	killErr error
}

// machine is a fake node: NVML's mock over its processes, and a /proc
// and a kill that read and change them.
type machine struct {
	mu     sync.Mutex
	procs  map[int]*fakeProc
	killed []int
	dying  []int // killed, gone from the next look on
	ngpus  int
}

func (m *machine) lib() *mock.Interface {
	devs := make([]nvml.Device, m.ngpus)
	for i := range devs {
		devs[i] = &mock.Device{
			GetUUIDFunc:                     func() (string, nvml.Return) { return "GPU-" + string(rune('a'+i)), nvml.SUCCESS },
			GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return m.list(i, false), nvml.SUCCESS },
			GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return m.list(i, true), nvml.SUCCESS },
		}
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return m.ngpus, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return devs[i], nvml.SUCCESS
		},
		SystemGetProcessNameFunc: func(pid int) (string, nvml.Return) { return "nvml-name-of-" + string(rune('0'+pid%10)), nvml.SUCCESS },
	}
}

func (m *machine) list(gpu int, graphics bool) []nvml.ProcessInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gpu == 0 && !graphics { // a look starts: the killed have died since
		var still []int
		for _, pid := range m.dying {
			if p := m.procs[pid]; p.lingers > 0 {
				p.lingers--
				still = append(still, pid)
				continue
			}
			delete(m.procs, pid)
		}
		m.dying = still
	}
	var ps []nvml.ProcessInfo
	for pid := range 1000 { // in PID order, as NVML's lists are not
		p := m.procs[pid]
		if p == nil {
			continue
		}
		use := p.gpus
		if graphics {
			use = p.graphics
		}
		if used, ok := use[gpu]; ok {
			ps = append(ps, nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: used})
		}
	}
	return ps
}

func (m *machine) procsFor(self int) procs {
	return procs{
		self: self,
		pids: func() []int {
			m.mu.Lock()
			defer m.mu.Unlock()
			return slices.Sorted(maps.Keys(m.procs))
		},
		read: func(pid int, name string) ([]byte, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			p := m.procs[pid]
			switch {
			case p == nil:
				return nil, fs.ErrNotExist
			case name == "environ" && p.environ != "":
				return []byte(p.environ), nil
			case name == "cmdline" && p.cmdline != "":
				return []byte(p.cmdline), nil
			}
			return nil, fs.ErrPermission
		},
		kill: func(pid int, stillJob func() bool) (bool, error) {
			if !stillJob() {
				return false, nil
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			p := m.procs[pid]
			if p.killErr != nil {
				return false, p.killErr
			}
			m.killed = append(m.killed, pid)
			if p.lingers > 0 {
				p.environ, p.cmdline = "", ""
			}
			if !p.stubborn {
				m.dying = append(m.dying, pid)
			}
			return true, nil
		},
	}
}

// jobEnv is a job process's environment; the marker sits among others.
const jobEnv = "HOME=/root\x00GORUN_RUN_ID=run1\x00PATH=/bin\x00"

var req = wire.GPUFreeRequest{Var: wire.RunIDVar, Value: "run1", TimeoutSeconds: 0.3}

func TestGPUFree(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name   string
		ngpus  int
		procs  map[int]*fakeProc
		free   bool
		killed []int
		waited bool
		check  func(t *testing.T, a wire.GPUFreeAnswer)
	}{
		{
			name: "clean", ngpus: 2, free: true,
			check: func(t *testing.T, a wire.GPUFreeAnswer) {
				if len(a.GPUs) != 2 || a.GPUs[1].UUID != "GPU-b" || len(a.GPUs[0].Processes) != 0 {
					t.Errorf("GPUs %+v", a.GPUs)
				}
			},
		},
		{
			name: "the job's process goes away after a kill; another user's stays", ngpus: 2, free: true, killed: []int{100}, waited: true,
			procs: map[int]*fakeProc{
				100: {environ: jobEnv, cmdline: "python3\x00train.py\x00--lr\x000.1\x00", gpus: map[int]uint64{0: 4096 * mib}},
				200: {cmdline: "other\x00", gpus: map[int]uint64{1: 1024 * mib}},
			},
			check: func(t *testing.T, a wire.GPUFreeAnswer) {
				want := wire.GPUProcess{PID: 100, Command: "python3 train.py --lr 0.1", MemoryMiB: 4096, Job: true, Killed: true}
				if len(a.GPUs[0].Processes) != 1 || a.GPUs[0].Processes[0] != want {
					t.Errorf("GPU 0: %+v, want %+v", a.GPUs[0].Processes, want)
				}
				want = wire.GPUProcess{PID: 200, Command: "other", MemoryMiB: 1024, Held: true}
				if len(a.GPUs[1].Processes) != 1 || a.GPUs[1].Processes[0] != want {
					t.Errorf("GPU 1: %+v, want %+v", a.GPUs[1].Processes, want)
				}
			},
		},
		{
			name: "a stubborn process: not freed within the bound", ngpus: 1, killed: []int{7},
			waited: true,
			procs:  map[int]*fakeProc{7: {environ: jobEnv, cmdline: "python3\x00", gpus: map[int]uint64{0: 80 * mib}, stubborn: true}},
			check: func(t *testing.T, a wire.GPUFreeAnswer) {
				if p := a.GPUs[0].Processes[0]; !p.Held || !p.Killed || !p.Job {
					t.Errorf("process %+v, want the job's, killed and still holding", p)
				}
				if a.Waited < 300*time.Millisecond {
					t.Errorf("waited %s, want the bound", a.Waited)
				}
			},
		},
		{
			name: "one process on two GPUs, as compute and graphics: killed once", ngpus: 2, free: true, killed: []int{5}, waited: true,
			procs: map[int]*fakeProc{5: {environ: jobEnv, cmdline: "x\x00",
				gpus: map[int]uint64{0: 10 * mib, 1: 20 * mib}, graphics: map[int]uint64{0: 12 * mib}}},
			check: func(t *testing.T, a wire.GPUFreeAnswer) {
				for i, g := range a.GPUs {
					if len(g.Processes) != 1 || !g.Processes[0].Killed {
						t.Errorf("GPU %d: %+v", i, g.Processes)
					}
				}
				if a.GPUs[0].Processes[0].MemoryMiB != 12 {
					t.Errorf("merged memory %d MiB, want 12", a.GPUs[0].Processes[0].MemoryMiB)
				}
			},
		},
		{
			name: "the job's process holding no memory, one NVML cannot size, this process itself", ngpus: 1, free: true, killed: []int{9}, waited: true,
			procs: map[int]*fakeProc{
				8: {environ: jobEnv, cmdline: "idle\x00", gpus: map[int]uint64{0: 0}},
				9: {environ: jobEnv, cmdline: "unsized\x00", gpus: map[int]uint64{0: notAvailable}},
				3: {environ: jobEnv, cmdline: "self\x00", gpus: map[int]uint64{0: 1 * mib}},
			},
			check: func(t *testing.T, a wire.GPUFreeAnswer) {
				ps := a.GPUs[0].Processes
				if len(ps) != 3 || ps[0].Job || ps[1].Killed || ps[2].MemoryMiB != -1 || !ps[2].Killed {
					t.Errorf("processes %+v", ps)
				}
			},
		},
		{
			name: "a command line cut and escaped; no cmdline: NVML's name", ngpus: 1, free: true,
			procs: map[int]*fakeProc{
				1: {cmdline: "evil\x00\x1b[2J\n" + long + "\x00", gpus: map[int]uint64{0: mib}},
				2: {gpus: map[int]uint64{0: mib}},
			},
			check: func(t *testing.T, a wire.GPUFreeAnswer) {
				want := `evil \x1b[2J\x0a` + long[:200-len("evil \x1b[2J\n")] + "…"
				if got := a.GPUs[0].Processes[0].Command; got != want {
					t.Errorf("command %q, want %q", got, want)
				}
				if got := a.GPUs[0].Processes[1].Command; got != "nvml-name-of-2" {
					t.Errorf("command %q, want NVML's name", got)
				}
			},
		},
		{
			name: "a kill that fails", ngpus: 1, waited: true,
			procs: map[int]*fakeProc{4: {environ: jobEnv, gpus: map[int]uint64{0: mib}, killErr: syscall.EPERM}},
			check: func(t *testing.T, a wire.GPUFreeAnswer) {
				if len(a.Errors) != 1 || !strings.Contains(a.Errors[0], "kill PID 4: operation not permitted") {
					t.Errorf("errors %q", a.Errors)
				}
				if p := a.GPUs[0].Processes[0]; p.Killed || !p.Held {
					t.Errorf("process %+v", p)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &machine{procs: tt.procs, ngpus: tt.ngpus}
			if m.procs == nil {
				m.procs = map[int]*fakeProc{}
			}
			a := gpuFree(t.Context(), req, m.lib(), m.procsFor(3))
			if a.NoGPUs || a.Free != tt.free {
				t.Errorf("no GPUs %v, free %v; want free %v", a.NoGPUs, a.Free, tt.free)
			}
			if !slices.Equal(m.killed, tt.killed) {
				t.Errorf("killed %v, want %v", m.killed, tt.killed)
			}
			if (a.Waited > 0) != tt.waited {
				t.Errorf("waited %s, want a wait: %v", a.Waited, tt.waited)
			}
			if tt.check != nil {
				tt.check(t, a)
			}
		})
	}
}

// TestGPUFreeNoGPUs: NVML that does not load, or sees no GPU, is a
// no-op that says so; a count that fails is said and checks nothing.
func TestGPUFreeNoGPUs(t *testing.T) {
	never := procs{read: func(int, string) ([]byte, error) { t.Error("read /proc"); return nil, nil },
		kill: func(int, func() bool) (bool, error) { t.Error("killed"); return false, nil }}
	a := gpuFree(t.Context(), req, noNVML(), never)
	if !a.NoGPUs || !a.Free || !strings.Contains(a.Reason, "NVML does not load") {
		t.Errorf("no NVML: %+v", a)
	}
	a = gpuFree(t.Context(), req, (&machine{}).lib(), never)
	if !a.NoGPUs || a.Reason != "NVML sees no GPU" {
		t.Errorf("no GPU: %+v", a)
	}
	lib := (&machine{}).lib()
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	a = gpuFree(t.Context(), req, lib, never)
	if a.NoGPUs || !a.Free || len(a.Errors) != 1 || !strings.HasPrefix(a.Errors[0], "count the GPUs: ") {
		t.Errorf("count failed: %+v", a)
	}
	// A mock with nothing implemented panics on every call: no GPUs.
	if a = gpuFree(t.Context(), req, &mock.Interface{}, never); !a.NoGPUs {
		t.Errorf("bare mock: %+v", a)
	}
}

// TestGPUFreeListFails: a GPU whose handle or processes NVML cannot give
// is named in the errors, and the others are checked.
func TestGPUFreeListFails(t *testing.T) {
	m := &machine{ngpus: 3, procs: map[int]*fakeProc{}}
	lib := m.lib()
	handle := lib.DeviceGetHandleByIndexFunc
	lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		switch i {
		case 1:
			return nil, nvml.ERROR_GPU_IS_LOST
		case 2:
			return &mock.Device{}, nvml.SUCCESS // lists nothing: every call panics
		}
		return handle(i)
	}
	a := gpuFree(t.Context(), req, lib, m.procsFor(1))
	want := []string{"GPU 1: " + nvml.ERROR_GPU_IS_LOST.Error(), "GPU 2: list its processes: " + nvml.ERROR_NOT_SUPPORTED.Error()}
	if !a.Free || strings.Join(a.Errors, "\n") != strings.Join(want, "\n") || len(a.GPUs) != 2 {
		t.Errorf("answer %+v, want errors %q", a, want)
	}
}

// TestGPUFreeCancelled: the wait ends with its context, and the answer
// says what was left.
func TestGPUFreeCancelled(t *testing.T) {
	m := &machine{ngpus: 1, procs: map[int]*fakeProc{7: {environ: jobEnv, gpus: map[int]uint64{0: mib}, stubborn: true}}}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	long := req
	long.TimeoutSeconds = 60
	start := time.Now()
	a := gpuFree(ctx, long, m.lib(), m.procsFor(1))
	if a.Free || time.Since(start) > 10*time.Second {
		t.Errorf("answer %+v after %s", a, time.Since(start))
	}
}

func TestRunGPUFree(t *testing.T) {
	var out bytes.Buffer
	for _, arg := range []string{"", "{", `{"var": 3}`} {
		if err := RunGPUFree(t.Context(), arg, nil, &out); err == nil || !strings.HasPrefix(err.Error(), wire.GPUFreeCommand+": bad request: ") {
			t.Errorf("RunGPUFree(%q) = %v, want a bad request", arg, err)
		}
	}
	if out.Len() != 0 {
		t.Errorf("printed %q", out.String())
	}
	// The real NVML, on whatever this machine has: no process carries
	// this marker.
	arg, _ := json.Marshal(wire.GPUFreeRequest{Var: wire.RunIDVar, Value: "no-such-run", TimeoutSeconds: 1})
	if err := RunGPUFree(t.Context(), string(arg), nil, &out); err != nil {
		t.Fatal(err)
	}
	var a wire.GPUFreeAnswer
	if err := json.Unmarshal(out.Bytes(), &a); err != nil || !a.Free {
		t.Errorf("answer %s (%v), want free", out.Bytes(), err)
	}
	// Started ahead ("-"): the request comes on stdin; none is an error.
	out.Reset()
	if err := RunGPUFree(t.Context(), "-", strings.NewReader(string(arg)+"\n"), &out); err != nil || !strings.Contains(out.String(), `"free":true`) {
		t.Errorf("RunGPUFree - with the request on stdin: %v, %s", err, out.Bytes())
	}
	out.Reset()
	if err := RunGPUFree(t.Context(), "-", strings.NewReader(""), &out); err == nil || out.Len() != 0 {
		t.Errorf("RunGPUFree - with nothing on stdin: %v, printed %q", err, out.String())
	}
	m := &machine{ngpus: 1, procs: map[int]*fakeProc{}}
	out.Reset()
	if err := runGPUFree(t.Context(), string(arg), &out, m.lib(), m.procsFor(1)); err != nil || !strings.Contains(out.String(), `"free":true`) {
		t.Errorf("runGPUFree: %v, %s", err, out.Bytes())
	}
}

func TestRequestTimeout(t *testing.T) {
	if d := (wire.GPUFreeRequest{}).Timeout(); d != wire.DefaultGPUFreeTimeout {
		t.Errorf("default %s", d)
	}
	if d := (wire.GPUFreeRequest{TimeoutSeconds: 2.5}).Timeout(); d != 2500*time.Millisecond {
		t.Errorf("2.5 s: %s", d)
	}
}

// TestProcReader: the real /proc reader, on this test process itself: its
// own environment holds its PATH, not a marker it lacks, and its command
// line is its arguments.
func TestProcReader(t *testing.T) {
	path, ok := os.LookupEnv("PATH")
	if !ok {
		t.Skip("no PATH")
	}
	p := hostProcs()
	self := p.self
	p.self = -1 // judge this process like any other
	if !p.isJob(self, wire.GPUFreeRequest{Var: "PATH", Value: path}) {
		t.Error("PATH not found in /proc/self/environ")
	}
	if p.isJob(self, wire.GPUFreeRequest{Var: "PATH", Value: path + "x"}) || p.isJob(self, wire.GPUFreeRequest{Value: path}) {
		t.Error("a marker this process lacks was found")
	}
	if hostProcs().isJob(self, wire.GPUFreeRequest{Var: "PATH", Value: path}) {
		t.Error("the check's own process judged the job's")
	}
	if p.isJob(-5, wire.GPUFreeRequest{Var: "PATH", Value: path}) {
		t.Error("a process that does not exist judged the job's")
	}
	if got := p.command(self); !strings.HasPrefix(got, escapeCommand(os.Args[0])) {
		t.Errorf("command %q, want it to start with %q", got, os.Args[0])
	}
	if got := p.command(-5); got != "" {
		t.Errorf("command of no process: %q", got)
	}
}

// TestKillJob: the real kill, on a child: sent when it is still the job's,
// not when it is not, and no error once it is gone.
func TestKillJob(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	pid := cmd.Process.Pid
	if sent, err := killJob(pid, func() bool { return false }); sent || err != nil {
		t.Errorf("no longer the job's: sent %v, %v", sent, err)
	}
	if sent, err := killJob(pid, func() bool { return true }); !sent || err != nil {
		t.Errorf("the job's: sent %v, %v", sent, err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("child ended with %v, want SIGKILL", err)
	}
	if sent, err := killJob(pid, func() bool { return false }); sent || err != nil {
		t.Errorf("gone: sent %v, %v", sent, err)
	}
}

// TestGPUFreeSweep: with Sweep, every process of the job is killed first,
// on a GPU or not and with no NVML at all; others' are left alone, and a
// kill that fails is an error that names the process.
func TestGPUFreeSweep(t *testing.T) {
	m := &machine{procs: map[int]*fakeProc{
		10: {environ: jobEnv, cmdline: "python\x00train.py"},
		11: {environ: "HOME=/root\x00GORUN_RUN_ID=run2\x00", cmdline: "python\x00other.py"},
		12: {environ: jobEnv, cmdline: "python\x00-c\x00dataloader"},
		13: {environ: jobEnv, cmdline: "stuck", killErr: errors.New("operation not permitted")},
		14: {cmdline: "unreadable"},
		99: {environ: jobEnv, cmdline: "gorun\x00_gpufree"}, // the check itself
	}}
	sw := req
	sw.Sweep = true
	a := gpuFree(t.Context(), sw, noNVML(), m.procsFor(99))
	if !a.NoGPUs || !a.Free {
		t.Errorf("no NVML: %+v", a)
	}
	if got := fmt.Sprint(m.killed); got != "[10 12]" {
		t.Errorf("killed %s, want [10 12]", got)
	}
	if len(a.Swept) != 2 || a.Swept[0].PID != 10 || a.Swept[0].Command != "python train.py" || !a.Swept[1].Killed {
		t.Errorf("swept = %+v", a.Swept)
	}
	if len(a.Errors) != 1 || !strings.Contains(a.Errors[0], "kill PID 13 stuck: operation not permitted") {
		t.Errorf("errors = %q", a.Errors)
	}
	// Without Sweep, a process off the GPUs is left alone.
	m.killed = nil
	if a := gpuFree(t.Context(), req, noNVML(), m.procsFor(99)); len(m.killed) != 0 || len(a.Swept) != 0 {
		t.Errorf("no sweep asked, yet killed %v, swept %+v", m.killed, a.Swept)
	}
}

// TestGPUFreeSweepWaitsForTheSwept: a process the sweep killed still holds
// its GPU memory for a while, and its environment can no longer be read
// (as on the H200: docs/device/h200-1gpu/restart/gpu-sweep.txt); it is
// still the job's, so the check waits until it is gone.
func TestGPUFreeSweepWaitsForTheSwept(t *testing.T) {
	m := &machine{ngpus: 1, procs: map[int]*fakeProc{
		10: {environ: jobEnv, cmdline: "python\x00train.py", gpus: map[int]uint64{0: 1024 * mib}, lingers: 2},
		11: {environ: "GORUN_RUN_ID=run2\x00", cmdline: "python\x00other.py", gpus: map[int]uint64{0: 512 * mib}},
	}}
	sw := req
	sw.Sweep, sw.TimeoutSeconds = true, 5
	a := gpuFree(t.Context(), sw, m.lib(), m.procsFor(99))
	if !a.Free || a.Waited == 0 {
		t.Errorf("free %v after %v, want free after waiting for PID 10 to go", a.Free, a.Waited)
	}
	if fmt.Sprint(m.killed) != "[10]" {
		t.Errorf("killed %v, want [10] once", m.killed)
	}
	if len(a.GPUs) != 1 || len(a.GPUs[0].Processes) != 2 {
		t.Fatalf("GPUs = %+v", a.GPUs)
	}
	for _, p := range a.GPUs[0].Processes {
		if want := p.PID == 10; p.Job != want || p.Killed != want {
			t.Errorf("PID %d: job %v, killed %v, want %v", p.PID, p.Job, p.Killed, want)
		}
	}
}
