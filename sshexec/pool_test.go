package sshexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/rank"
	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/sys/unix"
)

// testPoolEnv makes the test binary act as the job's main process of a
// pooled job (helper-process pattern): a torchrun whose workers'
// supervisors take their interpreters from the pool, one after another,
// as $GORUN_TEST_TAKES (testTake, JSON) lists them.
const testPoolEnv = "GORUN_TEST_POOL"

// testTake is one worker the helper asks the pool for.
type testTake struct {
	Slot   int               `json:"slot"`
	Module bool              `json:"module,omitempty"`
	Target string            `json:"target"`
	Args   []string          `json:"args,omitempty"`
	Env    map[string]string `json:"env,omitempty"` // on top of the helper's
	CPUs   []int             `json:"cpus,omitempty"`
	// HangUp: the supervisor drops its connection once the worker runs,
	// as a supervisor that is killed does, and reports whether the worker
	// went with it.
	HangUp bool `json:"hang_up,omitempty"`
	// KillAgent: once the worker runs, the agent is killed (SIGKILL); a
	// watcher of its own session writes to this file whether the worker
	// and the pool's other interpreters outlived it.
	KillAgent string `json:"kill_agent,omitempty"`
	// AbandonMS: the supervisor stops waiting for its interpreter this
	// many milliseconds after it asked (it was told to stop).
	AbandonMS int `json:"abandon_ms,omitempty"`
	// InterruptMS: once taken, the worker's process group gets SIGINT
	// this many milliseconds later, as a stop's or Ctrl-C's from its
	// supervisor (-1: none).
	InterruptMS int `json:"interrupt_ms,omitempty"`
	// InterruptServerMS: this many milliseconds after the take is asked
	// for, the fork server of the pool's first group (warm-0.py) gets
	// SIGINT, while it imports.
	InterruptServerMS int `json:"interrupt_server_ms,omitempty"`
}

// poolHelper is the test binary as a pooled job's main process.
func poolHelper() int {
	var takes []testTake
	if err := json.Unmarshal([]byte(os.Getenv("GORUN_TEST_TAKES")), &takes); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sock := os.Getenv(wire.PoolSocketVar)
	// The agent starts its pool just after the job's main process (this
	// one), which torchrun's workers never outrun; this helper may, on a
	// loaded machine.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
	}
	dir, _ := os.Getwd()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 2
	}
	for i, tt := range takes {
		env := append(os.Environ(), "PYTHONFAULTHANDLER=1") // as gorun _rank sets it
		for k, v := range tt.Env {
			env = append(env, k+"="+v)
		}
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, wire.PoolSocketVar+"=") })
		take := wire.PoolTake{Slot: tt.Slot, Interp: "/usr/bin/python3", Module: tt.Module, Target: tt.Target,
			Args: tt.Args, Env: env, Dir: dir, CPUs: tt.CPUs}
		if tt.InterruptServerMS > 0 {
			go func() {
				time.Sleep(time.Duration(tt.InterruptServerMS) * time.Millisecond)
				if pid := forkServer(os.Getppid(), "warm-0.py"); pid > 0 {
					unix.Kill(pid, syscall.SIGINT)
				}
			}()
		}
		var abandon chan struct{}
		if tt.AbandonMS > 0 {
			abandon = make(chan struct{})
			time.AfterFunc(time.Duration(tt.AbandonMS)*time.Millisecond, func() { close(abandon) })
		}
		asked := time.Now()
		p, cold, err := rank.TakePooled(sock, take, devnull, os.Stdout, os.Stderr, abandon)
		switch {
		case errors.Is(err, rank.ErrTakeAbandoned):
			fmt.Printf("take %d: abandoned after %dms\n", i, time.Since(asked).Milliseconds())
			continue
		case err != nil:
			fmt.Printf("take %d: error: %v\n", i, err)
			continue
		case cold != "":
			fmt.Printf("take %d: cold: %s\n", i, cold)
			continue
		}
		if tt.InterruptMS > 0 {
			go func() {
				time.Sleep(time.Duration(tt.InterruptMS-1) * time.Millisecond)
				unix.Kill(-p.PID, syscall.SIGINT)
			}()
		}
		if tt.KillAgent != "" {
			time.Sleep(200 * time.Millisecond) // the worker runs
			// This process dies with the agent: the watcher, in a session
			// of its own, outlives both.
			shims := filepath.Join(filepath.Dir(sock), "[w]arm-") // a pattern that does not match the watcher
			watch := fmt.Sprintf(`sleep 0.2; kill -9 %d; for i in $(seq 100); do
  if ! kill -0 %d 2>/dev/null && ! pgrep -f %q >/dev/null; then echo gone >%q; exit; fi; sleep 0.05; done
echo "left: $(pgrep -af %q)" >%q`, os.Getppid(), p.PID, shims, tt.KillAgent, shims, tt.KillAgent)
			cmd := exec.Command("sh", "-c", watch)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				fmt.Printf("take %d: watcher: %v\n", i, err)
			}
			select {} // killed with the agent
		}
		if tt.HangUp {
			time.Sleep(200 * time.Millisecond) // the worker runs
			p.Close()
			deadline := time.Now().Add(5 * time.Second)
			for unix.Kill(p.PID, 0) == nil && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			fmt.Printf("take %d: hung up: worker alive %v\n", i, unix.Kill(p.PID, 0) == nil)
			continue
		}
		ws := p.Wait()
		words := fmt.Sprintf("exit %d", ws.ExitStatus())
		if !ws.Exited() {
			words = fmt.Sprintf("signal %d", ws.Signal())
		}
		fmt.Printf("take %d: pooled pid %d: %s\n", i, p.PID, words)
	}
	if os.Getenv("GORUN_TEST_HOLD") == "1" {
		// As torchrun before it starts its workers: the pool's
		// interpreters are forked and wait, and nothing took them.
		agent, want := os.Getppid(), atoiEnv("GORUN_TEST_SLOTS")
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if len(children(agent, "warm-")) == want {
				break
			}
		}
		fmt.Printf("held: %d interpreters forked\n", len(children(agent, "warm-")))
		time.Sleep(time.Hour)
	}
	return 0
}

// atoiEnv is the number in the environment variable name, 0 if none.
func atoiEnv(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// children are the pids of parent's children whose command line names
// shim.
func children(parent int, shim string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		cmd, err2 := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err1 != nil || err2 != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(stat), ") ")
		if f := strings.Fields(rest); len(f) > 1 && f[1] == strconv.Itoa(parent) && strings.Contains(string(cmd), shim) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// forkServer is the pid of agent's child whose command line names shim,
// 0 if none.
func forkServer(agent int, shim string) int {
	if pids := children(agent, shim); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// poolScript says what a worker sees, prints a line to stderr too, and
// ends as $END says: an exit code, or "TERM" to die by SIGTERM.
const poolScript = `import os, signal, sys


def square(x):
    return x * x


def main():
    # One write per line: the test reads stdout and stderr merged, and
    # under python -u print writes each argument apart.
    say = lambda *a, f=sys.stdout: f.write(" ".join(str(x) for x in a) + "\n")
    say("argv", sys.argv, "name", __name__, "path0", sys.path[0], "cwd", os.getcwd(),
        "FOO", os.environ.get("FOO"), "RC", os.environ.get("TORCHELASTIC_RESTART_COUNT"),
        "ahead", "noisy" in sys.modules, "cpus", sorted(os.sched_getaffinity(0)),
        "fh", os.environ.get("PYTHONFAULTHANDLER"), "stdin", repr(sys.stdin.read()), "lc", os.environ.get("LC_CTYPE"))
    say("file", __file__, "package", __package__, "spec", __spec__, "loader", type(__loader__).__name__)
    import faulthandler
    say("stdio", type(sys.stdout.buffer).__name__, sys.stdout.write_through, sys.stderr.line_buffering, "fh on", faulthandler.is_enabled())
    # what ps and the like read of this process
    procargv = [a.decode() for a in open("/proc/self/cmdline", "rb").read().split(b"\0") if a]
    procenv = [e.decode() for e in open("/proc/self/environ", "rb").read().split(b"\0") if e]
    say("proc argv", procargv[1:], "FOO", [e for e in procenv if e.startswith("FOO=")], "room", any("POOL_ROOM" in e for e in procenv))
    say("to stderr", f=sys.stderr)
    end = os.environ.get("END", "0")
    if end == "TERM":
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    if end == "RAISE":
        raise ValueError("from the worker")
    if end == "SLEEP":
        signal.pause()
    if end == "OWN":  # how much of its memory it shares (with the idle slot beside it), now and later
        def shared_dirty():
            for line in open("/proc/self/smaps_rollup"):
                if line.startswith("Shared_Dirty:"):
                    return int(line.split()[1])
        import time
        first = shared_dirty()
        time.sleep(3)
        say("shared dirty kB", first, "then", shared_dirty())
        end = "0"
    if end == "SPAWN":
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(1) as p:
            sys.stdout.write("spawned %s\n" % p.map(square, [3]))
        end = "0"
    sys.exit(int(end))


if __name__ == "__main__":
    main()
`

// poolJob is a pooled job of the helper in a folder holding poolScript,
// a package module pwmod, and a module noisy that prints at import.
func poolJob(t *testing.T, slots int, takes []testTake) (wire.Job, string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"job.py":   poolScript,
		"pwmod.py": "import sys\nsys.stdout.write('module %s %s\\n' % (__name__, sys.argv))\n",
		"noisy.py": "import sys\nsys.stdout.write('noisy at import\\n')\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(takes)
	if err != nil {
		t.Fatal(err)
	}
	pool := &wire.Pool{Modules: []string{"noisy", "no_such_module_here"}, Late: []string{"TORCHELASTIC_*"}}
	for range slots {
		pool.Slots = append(pool.Slots, wire.PoolSlot{Default: map[string]string{"PYTHONFAULTHANDLER": "1"}})
	}
	return wire.Job{
		Argv:  []string{os.Args[0]},
		Env:   map[string]string{testAgentEnv: "0", testPoolEnv: "1", "GORUN_TEST_TAKES": string(b), "PYTHON_EXEC": "/usr/bin/python3", "PYTHONPATH": dir, "FOO": "job"},
		Dir:   dir,
		Relay: true,
		Pool:  pool,
	}, dir
}

func runPool(t *testing.T, job wire.Job) string {
	t.Helper()
	var f frames
	if code := runWarm(t, newTestLocal(t), job, &f); code != 0 {
		t.Fatalf("helper exit %d:\n%s", code, f.out.String())
	}
	return f.out.String()
}

// TestPool: a worker taken from the pool runs its script as `python -u
// script` would, as __main__, with the environment, arguments, folder
// and streams its supervisor hands over and the modules imported ahead
// (what they printed first, in its own stream); it ends with its own exit
// code or signal, reported through the supervisor.
func TestPool(t *testing.T) {
	needPython(t)
	one := firstCPU(t)
	job, dir := poolJob(t, 7, nil)
	job.Pool.Slots[3].CPUs = []int{one}
	takes := []testTake{
		{Slot: 0, Target: "job.py", Args: []string{"a", "b c"}, Env: map[string]string{"FOO": "worker", "TORCHELASTIC_RESTART_COUNT": "3", "END": "7"}},
		{Slot: 1, Module: true, Target: "pwmod", Args: []string{"x"}},
		{Slot: 2, Target: filepath.Join(dir, "job.py"), Env: map[string]string{"END": "TERM"}},
		{Slot: 3, Target: "job.py", CPUs: []int{one}, Env: map[string]string{"END": "RAISE"}},
		{Slot: 0, Target: "job.py"}, // taken already
		{Slot: 4, Target: "nope.py"},
		{Slot: 5, Module: true, Target: "nopemod"},
		{Slot: 6, Target: "job.py", Env: map[string]string{"END": "SPAWN"}},
	}
	b, _ := json.Marshal(takes)
	job.Env["GORUN_TEST_TAKES"] = string(b)
	out := runPool(t, job)

	for _, want := range []string{
		// the script, as __main__, with its args, sys.path[0] its folder,
		// the worker's variables (a late one too) and no stdin
		fmt.Sprintf("argv ['job.py', 'a', 'b c'] name __main__ path0 %s cwd %s FOO worker RC 3 ahead True cpus", dir, dir),
		fmt.Sprintf("file %s package None spec None loader SourceFileLoader", filepath.Join(dir, "job.py")),
		"fh 1 stdin ''",
		// ps shows the worker's command line and environment, not the pool's
		"proc argv ['-u', 'job.py', 'a', 'b c'] FOO ['FOO=worker'] room False",
		"take 0: pooled pid",
		": exit 7\n",
		// -m: sys.argv[0] is the module's file, as python -m sets it
		fmt.Sprintf("module __main__ ['%s', 'x']", filepath.Join(dir, "pwmod.py")),
		"take 2: pooled pid",
		fmt.Sprintf(": signal %d\n", syscall.SIGTERM),
		fmt.Sprintf("cpus [%d]", one),
		"ValueError: from the worker",
		"take 4: cold: no pooled interpreter for local rank 0",
		// what python says and does when there is nothing to run
		// (on stderr: its order against stdout is not kept)
		fmt.Sprintf("/usr/bin/python3: can't open file '%s': [Errno 2] No such file or directory\n", filepath.Join(dir, "nope.py")),
		"/usr/bin/python3: No module named nopemod\n",
		// multiprocessing's spawn finds __main__ again in its children
		"spawned [9]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The traceback starts at the script, as without the pool.
	if strings.Contains(out, "warm-") || strings.Contains(out, "runpy") {
		t.Errorf("the traceback shows the pool's shim or runpy:\n%s", out)
	}
	if !regexp.MustCompile(`take 3: pooled pid \d+: exit 1\n`).MatchString(out) {
		t.Errorf("an uncaught exception does not end the worker with exit 1, as python's:\n%s", out)
	}
	// What the pool's import printed comes first in each worker's stream.
	if !regexp.MustCompile(`take 5: pooled pid \d+: exit 2\n`).MatchString(out) || !regexp.MustCompile(`take 6: pooled pid \d+: exit 1\n`).MatchString(out) {
		t.Errorf("nothing to run does not end as python's (exit 2 for a file, 1 for a module):\n%s", out)
	}
	if n := strings.Count(out, "noisy at import"); n != 7 {
		t.Errorf("the import's line shows %d times, want once per worker:\n%s", n, out)
	}
	if i, j := strings.Index(out, "noisy at import"), strings.Index(out, "argv ['job.py', 'a'"); i > j {
		t.Errorf("the import's line comes after the worker's:\n%s", out)
	}
}

// TestPoolColdStart: a worker whose import-time environment, CPUs or
// folder differ from its interpreter's starts cold, and is told why; an
// interpreter left untaken goes with the job.
func TestPoolColdStart(t *testing.T) {
	needPython(t)
	takes := []testTake{
		{Slot: 0, Target: "job.py", Env: map[string]string{"PYTHONHASHSEED": "7"}},
		{Slot: 1, Target: "job.py", CPUs: []int{0}},
		{Slot: 5, Target: "job.py"},
		{Slot: 0, Target: "job.py"}, // its interpreter went with the refusal
	}
	job, _ := poolJob(t, 3, takes)
	out := runPool(t, job)
	for _, want := range []string{
		"take 0: cold: PYTHONHASHSEED, read at import time, differs from the pool's",
		"take 1: cold: the worker's CPU binding differs from the pool's",
		"take 2: cold: no pooled interpreter for local rank 5",
		"take 3: cold: no pooled interpreter for local rank 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPoolLocaleCoercion: in a C locale Python sets LC_CTYPE as it
// starts (PEP 538), so a worker handed LC_CTYPE by a torchrun that did so
// too, and one handed none by a torchrun started warm, both fit the
// interpreter that coerced it, and both see LC_CTYPE as a cold start
// would give it.
func TestPoolLocaleCoercion(t *testing.T) {
	needPython(t)
	if os.Getenv("LC_ALL") != "" || os.Getenv("LC_CTYPE") != "" {
		t.Skip("LC_ALL or LC_CTYPE set: no coercion to see")
	}
	probe := exec.Command("/usr/bin/python3", "-c", "import os; print(os.environ.get('LC_CTYPE'))")
	probe.Env = append(os.Environ(), "LANG=C")
	out, err := probe.Output()
	coerced := strings.TrimSpace(string(out))
	if err != nil || coerced == "None" {
		t.Skipf("this python coerces no C locale (%v)", err)
	}
	job, _ := poolJob(t, 2, []testTake{
		{Slot: 0, Target: "job.py", Env: map[string]string{"LC_CTYPE": coerced}},
		{Slot: 1, Target: "job.py"},
	})
	job.Env["LANG"] = "C"
	out2 := runPool(t, job)
	if strings.Contains(out2, "cold") || strings.Count(out2, "lc "+coerced+"\n") != 2 {
		t.Errorf("want both pooled, with LC_CTYPE=%s:\n%s", coerced, out2)
	}
}

// TestPoolInterrupt: a SIGINT (a user's, to every Python process) that
// reaches a fork server while it imports ahead is not lost: its workers
// end as python does on a Ctrl-C during its own import (a
// KeyboardInterrupt, then death by SIGINT) instead of running their
// scripts. One that a supervisor sends as soon as it has its worker's pid
// ends the worker the same way, whether it lands before the script
// starts or in it; one that comes while the script runs ends it with a
// traceback that starts at the script's frame.
func TestPoolInterrupt(t *testing.T) {
	needPython(t)
	one := firstCPU(t)
	job, dir := poolJob(t, 3, []testTake{
		{Slot: 0, Target: "job.py", Env: map[string]string{"FOO": "s0"}, InterruptServerMS: 700}, // during the 2 s import
		{Slot: 1, Target: "job.py", CPUs: []int{one}, Env: map[string]string{"FOO": "s1", "END": "SLEEP"}, InterruptMS: 1},
		{Slot: 2, Target: "job.py", CPUs: []int{one}, Env: map[string]string{"FOO": "s2", "END": "SLEEP"}, InterruptMS: 1500},
	})
	// Slots 1 and 2 on another CPU set: another fork server (no
	// OMP_NUM_THREADS here), which no SIGINT reaches.
	job.Pool.Slots[1].CPUs, job.Pool.Slots[2].CPUs = []int{one}, []int{one}
	if err := os.WriteFile(filepath.Join(dir, "slow.py"), []byte("import time\ntime.sleep(2)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job.Pool.Modules = append(job.Pool.Modules, "slow")
	out := runPool(t, job)
	for _, want := range []string{
		"take 0: pooled pid", "take 1: pooled pid", "take 2: pooled pid",
		"KeyboardInterrupt",
		"FOO s2",        // the third ran its script
		`job.py", line`, // and its traceback is at the script's frame
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, fmt.Sprintf(": signal %d\n", syscall.SIGINT)); n != 3 {
		t.Errorf("%d of 3 workers died by SIGINT:\n%s", n, out)
	}
	if strings.Contains(out, "FOO s0") {
		t.Errorf("the worker whose fork server was interrupted during its import ran its script:\n%s", out)
	}
	if strings.Contains(out, "warm-") {
		t.Errorf("a KeyboardInterrupt's traceback shows the pool's shim:\n%s", out)
	}
}

// allowedCPUs are the CPUs this process may run on.
func allowedCPUs(t *testing.T) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		t.Fatal("no CPU")
	}
	return cpus
}

// firstCPU is a CPU this process may run on.
func firstCPU(t *testing.T) int { return allowedCPUs(t)[0] }

// TestPoolForksOnce: slots with the same import-time environment share
// one fork server, which imports the modules once; with OMP_NUM_THREADS
// set, slots bound to different CPUs share it too, and each worker runs
// on its own slot's CPUs.
func TestPoolForksOnce(t *testing.T) {
	needPython(t)
	one := firstCPU(t)
	job, dir := poolJob(t, 3, []testTake{
		{Slot: 0, Target: "job.py", Env: map[string]string{"FOO": "s0"}},
		{Slot: 1, Target: "job.py", CPUs: []int{one}, Env: map[string]string{"FOO": "s1"}},
		{Slot: 2, Target: "job.py", Env: map[string]string{"FOO": "s2"}},
	})
	job.Env["OMP_NUM_THREADS"] = "1"
	job.Pool.Slots[1].CPUs = []int{one}
	counted := filepath.Join(dir, "imports.txt")
	if err := os.WriteFile(filepath.Join(dir, "counted.py"), []byte(fmt.Sprintf("import os\nwith open(%q, 'a') as f: f.write('%%d\\n' %% os.getpid())\n", counted)), 0o644); err != nil {
		t.Fatal(err)
	}
	job.Pool.Modules = append(job.Pool.Modules, "counted")
	out := runPool(t, job)
	all := strings.ReplaceAll(fmt.Sprint(allowedCPUs(t)), " ", ", ")
	for _, want := range []string{
		"FOO s0 RC None ahead True cpus " + all,
		fmt.Sprintf("FOO s1 RC None ahead True cpus [%d]", one),
		"FOO s2 RC None ahead True cpus " + all,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, ": exit 0\n"); n != 3 {
		t.Errorf("%d of 3 pooled workers ended well:\n%s", n, out)
	}
	b, err := os.ReadFile(counted)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Errorf("the modules were imported %d times for 3 slots, want once:\n%s", n, b)
	}
}

// TestPoolSupervisorGone: a worker whose supervisor hangs up (is killed)
// is killed by the agent; nothing of it outlives its supervisor.
func TestPoolSupervisorGone(t *testing.T) {
	needPython(t)
	job, _ := poolJob(t, 1, []testTake{{Slot: 0, Target: "job.py", Env: map[string]string{"END": "SLEEP"}, HangUp: true}})
	out := runPool(t, job)
	if !strings.Contains(out, "take 0: hung up: worker alive false") {
		t.Errorf("the worker outlived its supervisor:\n%s", out)
	}
}

// TestPoolAgentKilled: when the agent dies (SIGKILL), the worker running
// in a pooled interpreter and the interpreters still waiting die with it:
// each is the agent's child once its fork server has exited, with a
// parent-death signal set after that.
func TestPoolAgentKilled(t *testing.T) {
	needPython(t)
	result := filepath.Join(t.TempDir(), "result")
	job, _ := poolJob(t, 3, []testTake{{Slot: 0, Target: "job.py", Env: map[string]string{"END": "SLEEP"}, KillAgent: result}})
	var f frames
	p, err := newTestLocal(t).Start(context.Background(), job, f.decoder(), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = p.Wait() // ends when the agent dies
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(result); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			got = b
			break
		}
	}
	if string(got) != "gone\n" {
		t.Errorf("after the agent's death: %q, want every pooled interpreter gone\n%s", got, f.out.String())
	}
}

// TestPoolWait: a worker whose pool is still importing past wire.Pool.Wait
// starts cold, told why, so that it is a process a hang check can name.
func TestPoolWait(t *testing.T) {
	needPython(t)
	job, dir := poolJob(t, 1, []testTake{{Slot: 0, Target: "job.py"}})
	if err := os.WriteFile(filepath.Join(dir, "slow.py"), []byte("import time\ntime.sleep(5)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job.Pool.Modules = append(job.Pool.Modules, "slow")
	job.Pool.Wait = 300 * time.Millisecond
	if out := runPool(t, job); !strings.Contains(out, "take 0: cold: the pool was still importing 300ms after the worker came") {
		t.Errorf("want the worker to start cold once the wait is over:\n%s", out)
	}
}

// TestPoolTakeAbandoned: a supervisor told to stop while its pool is
// still importing stops waiting at once (and its worker never starts:
// TestWorkerStoppedBeforeStart), and the slot never runs a worker.
func TestPoolTakeAbandoned(t *testing.T) {
	needPython(t)
	job, dir := poolJob(t, 1, []testTake{{Slot: 0, Target: "job.py", AbandonMS: 300}})
	if err := os.WriteFile(filepath.Join(dir, "slow.py"), []byte("import time\ntime.sleep(3)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job.Pool.Modules = append(job.Pool.Modules, "slow")
	out := runPool(t, job)
	// The import takes 3 s: an answer before 2 s is the abandon's.
	m := regexp.MustCompile(`take 0: abandoned after (\d+)ms`).FindStringSubmatch(out)
	if ms, err := strconv.Atoi(func() string {
		if m == nil {
			return ""
		}
		return m[1]
	}()); err != nil || ms >= 2000 || strings.Contains(out, "argv [") {
		t.Errorf("want the take abandoned at once (300 ms) and no script run:\n%s", out)
	}
}

// TestPoolStopBeforeTakes: a stop by Ctrl-C (SIGINT) that comes once
// the pool's interpreters are forked but before any worker took one (as
// torchrun is still starting) ends them too: they hold SIGINT until a
// script runs, so the stop must not count on its signal. The job is gone
// well inside the stop's grace, not killed at its end.
func TestPoolStopBeforeTakes(t *testing.T) {
	needPython(t)
	job, _ := poolJob(t, 2, nil)
	job.Env["GORUN_TEST_HOLD"], job.Env["GORUN_TEST_SLOTS"] = "1", "2"
	const grace = 10 * time.Second
	job.Grace = grace
	var out syncBuffer
	p, err := newTestLocal(t).Start(context.Background(), job, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(string(out.Bytes()), "held:") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(string(out.Bytes()), "held: 2 interpreters forked") {
		t.Fatalf("the pool's 2 interpreters were not forked and waiting:\n%s", out.Bytes())
	}
	start := time.Now()
	p.Interrupt(syscall.SIGINT, 0)
	_, _ = p.Wait()
	if took := time.Since(start); took > grace/4 {
		t.Errorf("the stop took %v (grace %v): the waiting interpreters outlived its SIGINT\n%s", took.Round(time.Millisecond), grace, out.Bytes())
	}
}

// TestPoolTakeWithoutAgent: a supervisor whose pool is not there is told
// so, and starts its worker itself.
func TestPoolTakeWithoutAgent(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	_, cold, err := rank.TakePooled(filepath.Join(t.TempDir(), "pool"), wire.PoolTake{}, devnull, devnull, devnull, nil)
	if err == nil || cold != "" {
		t.Errorf("rank.TakePooled without a pool: cold %q, err %v; want an error", cold, err)
	}
}

// TestPoolAuto: under --prewarm auto a node with fewer CPUs than the
// imports plus torchrun's starts no interpreter, and each worker is told
// why and starts cold: slots that cannot share a fork server (bound to
// different CPUs, with no OMP_NUM_THREADS) import apart. Slots that share
// one import once, whatever their number, so the pool starts.
func TestPoolAuto(t *testing.T) {
	needPython(t)
	cpus := len(allowedCPUs(t))
	if cpus < 2 {
		t.Skipf("%d CPU: no room for one import beside torchrun's", cpus)
	}
	few, _ := poolJob(t, cpus, []testTake{{Slot: 0, Target: "job.py"}})
	few.Pool.Auto = true
	for i, c := range allowedCPUs(t) {
		few.Pool.Slots[i].CPUs = []int{c}
	}
	b, _ := json.Marshal([]testTake{{Slot: 0, Target: "job.py", CPUs: few.Pool.Slots[0].CPUs}})
	few.Env["GORUN_TEST_TAKES"] = string(b)
	if out := runPool(t, few); !strings.Contains(out, fmt.Sprintf("take 0: cold: --prewarm auto: %d CPUs here for %d pooled imports", cpus, cpus)) {
		t.Errorf("%d slots on %d CPUs, each on its own: want no pool, said:\n%s", cpus, cpus, out)
	}
	shared, _ := poolJob(t, 2*cpus, []testTake{{Slot: 0, Target: "job.py"}})
	shared.Pool.Auto = true
	if out := runPool(t, shared); !strings.Contains(out, "take 0: pooled pid") {
		t.Errorf("%d slots sharing one import on %d CPUs: want the pool:\n%s", 2*cpus, cpus, out)
	}
}

// TestPoolDidNotStart: where the pool cannot start (no interpreter to
// run it), each worker is told why and starts cold.
func TestPoolDidNotStart(t *testing.T) {
	needPython(t)
	job, _ := poolJob(t, 1, []testTake{{Slot: 0, Target: "job.py"}})
	job.Env["PYTHON_EXEC"] = "/nonexistent/python3"
	if out := runPool(t, job); !strings.Contains(out, "take 0: cold: the node's pool did not start: ") || !strings.Contains(out, "/nonexistent/python3") {
		t.Errorf("want the worker told why the pool did not start:\n%s", out)
	}
	// No PYTHON_EXEC, and a main process that is not a Python program:
	// no interpreter to find for the pool at all.
	job, _ = poolJob(t, 1, []testTake{{Slot: 0, Target: "job.py"}})
	delete(job.Env, "PYTHON_EXEC")
	if out := runPool(t, job); !strings.Contains(out, "take 0: cold: the node's pool did not start: ") {
		t.Errorf("want the worker told why the pool did not start:\n%s", out)
	}
}

// poolMain is a torchrun of the test's: a Python script that says what
// it sees and then runs the pool helper as its workers' supervisors.
const poolMain = `#!/usr/bin/python3
import faulthandler, os, subprocess, sys
say = lambda *a: sys.stdout.write(" ".join(str(x) for x in a) + "\n")
procargv = [a.decode() for a in open("/proc/self/cmdline", "rb").read().split(b"\0") if a]
procenv = [e.decode() for e in open("/proc/self/environ", "rb").read().split(b"\0") if e]
say("main argv", sys.argv, "name", __name__, "ahead", "aheadpkg" in sys.modules, "fh on", faulthandler.is_enabled(),
    "buffer", type(sys.stdout.buffer).__name__, "path0", sys.path[0] == os.path.dirname(os.path.realpath(__file__)))
def link(f):
    try:
        return os.readlink("/proc/self/fd/" + f)
    except OSError:
        return ""
sockets = [f for f in os.listdir("/proc/self/fd") if link(f).startswith("socket:")]
say("main proc argv", procargv[1:], "room", any("POOL_ROOM" in e for e in procenv), "sockets", sockets)
sys.stdout.flush()
sys.exit(subprocess.call([os.environ["GORUN_TEST_HELPER"]], close_fds=True))
`

// poolMainJob is poolJob's job with poolMain as its main process, run
// without -u as torchrun is, and a package aheadpkg the pool imports too
// (a package stays imported where a module would run afresh).
func poolMainJob(t *testing.T, takes []testTake, args ...string) (wire.Job, string) {
	t.Helper()
	job, dir := poolJob(t, len(takes), takes)
	main := filepath.Join(dir, "main.py")
	if err := os.WriteFile(main, []byte(poolMain), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "aheadpkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "aheadpkg", "__init__.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	job.Argv = append([]string{main}, args...)
	job.Env["GORUN_TEST_HELPER"] = os.Args[0]
	job.Env["PYTHONUNBUFFERED"] = ""
	job.Pool.Modules = append(job.Pool.Modules, "aheadpkg")
	return job, main
}

// TestPoolWithMain: where torchrun and its workers import alike, the job's
// main process is its pool's fork server: it imports the modules once, for
// itself and for the slots it forks, and then runs as it would have cold
// (its own arguments, streams, buffering and faulthandler, nothing of the
// pool's shown in ps), while its workers run as a pool's do (as python -u,
// faulthandler armed). Where they import differently, the two start side by
// side, as ever.
func TestPoolWithMain(t *testing.T) {
	needPython(t)
	for _, tc := range []struct {
		name    string
		shared  bool
		slotOMP string // OMP_NUM_THREADS the slots get when unset (torchrun's, for nproc > 1)
	}{
		{name: "shared", shared: true},
		{name: "workers import otherwise", slotOMP: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			takes := []testTake{
				{Slot: 0, Target: "job.py", Args: []string{"a"}, Env: map[string]string{"END": "3"}},
				{Slot: 1, Target: "job.py", Env: map[string]string{"END": "TERM"}},
			}
			job, main := poolMainJob(t, takes, "x", "y z")
			if tc.slotOMP != "" {
				for i := range job.Pool.Slots {
					job.Pool.Slots[i].Default = map[string]string{"PYTHONFAULTHANDLER": "1", "OMP_NUM_THREADS": tc.slotOMP}
				}
				takes[0].Env["OMP_NUM_THREADS"], takes[1].Env["OMP_NUM_THREADS"] = tc.slotOMP, tc.slotOMP
				b, _ := json.Marshal(takes)
				job.Env["GORUN_TEST_TAKES"] = string(b)
			}
			var f frames
			code := runWarm(t, newTestLocal(t), job, &f)
			out := f.out.String()
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for _, want := range []string{
				fmt.Sprintf("main argv ['%s', 'x', 'y z'] name __main__ ahead %s fh on False buffer BufferedWriter path0 True", main, map[bool]string{true: "True", false: "False"}[tc.shared]),
				// ps shows a cold start's command line; the room and the pool's sockets are gone
				fmt.Sprintf("main proc argv ['%s', 'x', 'y z'] room False sockets []", main),
				"argv ['job.py', 'a'] name __main__",
				"stdio FileIO True False fh on True",
				": exit 3\n",
				fmt.Sprintf(": signal %d\n", syscall.SIGTERM),
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "cold") || strings.Count(out, "pooled pid") != 2 {
				t.Errorf("want both workers pooled:\n%s", out)
			}
			// The import's line: once for each worker, and once for the
			// main process where it imported the modules too.
			want := 2
			if tc.shared {
				want = 3
			}
			if n := strings.Count(out, "noisy at import"); n != want {
				t.Errorf("the import's line shows %d times, want %d:\n%s", n, want, out)
			}
		})
	}
}

// standbyPoolJob is a standby's job with a pool of two slots, whose
// workers end with 3 and 0.
func standbyPoolJob(t *testing.T) (wire.Job, string) {
	takes := []testTake{
		{Slot: 0, Target: "job.py", Args: []string{"a"}, Env: map[string]string{"END": "3"}},
		{Slot: 1, Target: "job.py", Env: map[string]string{"END": "0"}},
	}
	job, main := poolMainJob(t, takes, "x")
	job.Preimport = []string{"email.mime.text"}
	return job, main
}

// TestStandbyWithPool: a standby whose workers import alike is its next
// attempt's pool's fork server: one import for the standby and its
// workers' interpreters. Handed its job, it runs with the job's arguments
// and environment and shows a cold start's command line, and its workers
// take their interpreters from it.
func TestStandbyWithPool(t *testing.T) {
	needPython(t)
	job, main := standbyPoolJob(t)
	l := newTestLocal(t)
	if err := l.Warm(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the imports, while "the attempt runs"
	next := job
	next.Argv = []string{main, "b", "c"}
	next.Env = maps.Clone(job.Env)
	next.Env["FOO"] = "next"
	var f frames
	code := runWarm(t, l, next, &f)
	out := f.out.String()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		fmt.Sprintf("main argv ['%s', 'b', 'c'] name __main__ ahead True fh on False buffer BufferedWriter path0 True", main),
		fmt.Sprintf("main proc argv ['%s', 'b', 'c'] room False sockets []", main),
		"FOO next RC None ahead True",
		"stdio FileIO True False fh on True",
		": exit 3\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "cold") || strings.Count(out, "pooled pid") != 2 {
		t.Errorf("want both workers pooled:\n%s", out)
	}
	if len(f.start) != 1 || !f.start[0].Warm {
		t.Errorf("start frames: %+v, want one warm", f.start)
	}
}

// TestStandbyPoolAtHandOver: the first attempt's standby starts before
// preflight has bound the slots to CPUs, so without the pool
// (launch.WarmFirst), and without the variables the plan sets from the
// facts. Handed a job that brings a pool and sets OMP_NUM_THREADS, it is
// used all the same (its process forks no worker, and such a variable
// only sizes the threads of the process that reads it), and the pool
// starts with the hand-over: both workers pooled. A variable that shapes
// more than computing (PYTHONHASHSEED) still starts the job cold, and so
// does a program that is no Python script (a shell wrapper: no standby
// starts at all); their workers are pooled all the same.
func TestStandbyPoolAtHandOver(t *testing.T) {
	needPython(t)
	job, main := standbyPoolJob(t)
	wrapper := filepath.Join(t.TempDir(), "wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec /usr/bin/python3 "+main+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	job.Env["PYTHON_EXEC"] = "/usr/bin/python3" // the workers' interpreter, which a wrapper does not name
	for _, tc := range []struct {
		name string
		set  map[string]string
		prog string
		warm bool
		cold string
	}{
		{name: "compute variables differ", prog: main, warm: true},
		{name: "PYTHONHASHSEED differs", prog: main, set: map[string]string{"PYTHONHASHSEED": "7"}, cold: "PYTHONHASHSEED"},
		{name: "a shell wrapper", prog: wrapper, cold: "/bin/sh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ahead := job
			ahead.Argv = []string{tc.prog, "x"}
			ahead.Pool = nil
			ahead.Env = maps.Clone(job.Env)
			l := newTestLocal(t)
			if err := l.Warm(context.Background(), ahead); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // the imports, while preflight runs
			next := job
			next.Argv = []string{tc.prog, "b"}
			next.Env = maps.Clone(job.Env)
			next.Env["OMP_NUM_THREADS"] = "1" // the plan's, from preflight's facts
			maps.Copy(next.Env, tc.set)
			var f frames
			code := runWarm(t, l, next, &f)
			out := f.out.String()
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if !strings.Contains(out, fmt.Sprintf("main argv ['%s', 'b']", main)) || !strings.Contains(out, ": exit 3\n") {
				t.Errorf("the job did not run as given:\n%s", out)
			}
			if strings.Contains(out, "cold") || strings.Count(out, "pooled pid") != 2 {
				t.Errorf("want both workers pooled:\n%s", out)
			}
			if len(f.start) != 1 || f.start[0].Warm != tc.warm || !strings.Contains(f.start[0].Cold, tc.cold) {
				t.Errorf("start frames: %+v, want warm %v, cold for %q", f.start, tc.warm, tc.cold)
			}
		})
	}
}

// TestPoolWorkerOwnsItsPages: a second into its run, a pooled worker makes
// the pages it still shares with its fork server's other interpreters its
// own (warm.py _own_later), so that its interpreter's exit copies none of
// them at its end.
func TestPoolWorkerOwnsItsPages(t *testing.T) {
	needPython(t)
	job, _ := poolJob(t, 2, []testTake{{Slot: 0, Target: "job.py", Env: map[string]string{"END": "OWN"}}})
	out := runPool(t, job)
	m := regexp.MustCompile(`shared dirty kB (\d+) then (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no figures:\n%s", out)
	}
	first, then := atoi(m[1]), atoi(m[2])
	if first < 1024 || then*10 > first {
		t.Errorf("shared dirty memory %d kB at the start, %d kB 3 s later: want it mostly gone (under a tenth)", first, then)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
