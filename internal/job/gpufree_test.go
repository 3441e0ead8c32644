package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/sshexec"
)

// Canned answers of `gorun _gpufree`.
const (
	cleanAnswer  = `{"gpus":[{"index":0,"processes":[{"pid":50,"command":"someone else","memory_mib":900,"held":true}]}],"waited_ns":0,"free":true}`
	freedAnswer  = `{"gpus":[{"index":0},{"index":1,"processes":[{"pid":4242,"command":"python3 train.py","memory_mib":4096,"job":true,"killed":true}]}],"waited_ns":230000000,"free":true}`
	heldAnswer   = `{"gpus":[{"index":0,"processes":[{"pid":77,"command":"python3 train.py","memory_mib":80000,"job":true,"killed":true,"held":true},{"pid":78,"command":"idle","memory_mib":0,"job":true}]}],"waited_ns":10000000000,"free":false}`
	noGPUsAnswer = `{"no_gpus":true,"reason":"NVML does not load: ERROR_LIBRARY_NOT_FOUND","waited_ns":0,"free":true}`
)

// gpuNode is a node whose teardown check answers answer (or fails with
// err), counting the calls and keeping the last request.
type gpuNode struct {
	*fakeRunner
	mu    sync.Mutex
	calls int
	req   wire.GPUFreeRequest
}

func newGPUNode(name, answer string, err error) *gpuNode {
	n := &gpuNode{}
	n.fakeRunner = &fakeRunner{name: name, agent: func(args []string) ([]byte, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.calls++
		if len(args) != 2 || args[0] != wire.GPUFreeCommand {
			return nil, errors.New("unexpected command " + strings.Join(args, " "))
		}
		if jerr := json.Unmarshal([]byte(args[1]), &n.req); jerr != nil {
			return nil, jerr
		}
		return []byte(answer), err
	}}
	return n
}

func gpuFreeHook(nodes ...*gpuNode) (*gpuFree, envplan.Plan, *bytes.Buffer) {
	runners := map[string]sshexec.Runner{}
	var plan envplan.Plan
	for _, n := range nodes {
		runners[n.name] = n
		plan.Nodes = append(plan.Nodes, envplan.NodePlan{Host: n.name})
	}
	plan.Nodes = append(plan.Nodes, envplan.NodePlan{Host: "no-runner"})
	var diag bytes.Buffer
	return newGPUFree("run1", runners, nil, &diag), plan, &diag
}

func TestGPUFreeHook(t *testing.T) {
	tests := []struct {
		name   string
		nodes  []*gpuNode
		err    bool
		said   []string // lines of diag, each in full or its start
		silent bool
	}{
		{name: "clean: nothing said", nodes: []*gpuNode{newGPUNode("a", cleanAnswer, nil), newGPUNode("b", cleanAnswer, nil)}, silent: true},
		{name: "killed and freed: one line for that node", nodes: []*gpuNode{newGPUNode("a", cleanAnswer, nil), newGPUNode("b", freedAnswer, nil)},
			said: []string{"gorun: b: the job still held GPU memory after the teardown: PID 4242 python3 train.py (4096 MiB on GPU 1, killed); free after 230ms"}},
		{name: "not freed: the restart fails", nodes: []*gpuNode{newGPUNode("a", freedAnswer, nil), newGPUNode("b", heldAnswer, nil)}, err: true,
			said: []string{
				"gorun: a: the job still held GPU memory after the teardown: PID 4242",
				"gorun: b: the job still held GPU memory after the teardown: PID 77 python3 train.py (80000 MiB on GPU 0, killed); still held after 10s",
			}},
		{name: "a node that cannot be asked, or answers nonsense: said, left to the recheck",
			nodes: []*gpuNode{newGPUNode("a", "", errors.New("connection lost")), newGPUNode("b", "garbage", nil)},
			said: []string{"gorun: GPU teardown check: a: connection lost (not checked there)",
				"gorun: GPU teardown check: b: read its answer: invalid character"}},
		{name: "what the node could not look at is said",
			nodes: []*gpuNode{newGPUNode("a", `{"free":true,"errors":["GPU 1: list its processes: ERROR_GPU_IS_LOST","kill PID 3: \u001b[2J"]}`, nil)},
			said:  []string{`gorun: GPU teardown check: a: GPU 1: list its processes: ERROR_GPU_IS_LOST; kill PID 3: \x1b[2J`}},
		{name: "a node that says it is not free but names no process", nodes: []*gpuNode{newGPUNode("a", `{"free":false}`, nil)}, err: true, silent: true},
		{name: "no GPUs anywhere", nodes: []*gpuNode{newGPUNode("a", noGPUsAnswer, nil), newGPUNode("b", noGPUsAnswer, nil)},
			said: []string{"gorun: GPU teardown check: no GPUs on 2 nodes; nothing to check"}},
		{name: "no GPUs on some", nodes: []*gpuNode{newGPUNode("a", noGPUsAnswer, nil), newGPUNode("b", cleanAnswer, nil)},
			said: []string{"gorun: GPU teardown check: no GPUs on 1 node (a); nothing to check there"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, plan, diag := gpuFreeHook(tt.nodes...)
			a := &Attempt{K: 1, Plan: plan, Restart: &launch.Restart{Failed: time.Now()}}
			err := g.BeforeAttempt(context.Background(), a)
			if (err != nil) != tt.err {
				t.Errorf("err = %v, want an error: %v", err, tt.err)
			}
			if err != nil && (!errors.Is(err, ErrGPUNotFreed) || !errors.Is(err, ErrRecheckFailed)) {
				t.Errorf("err %v is not ErrGPUNotFreed, ErrRecheckFailed", err)
			}
			lines := strings.Split(strings.TrimSuffix(diag.String(), "\n"), "\n")
			switch {
			case tt.silent && diag.Len() != 0:
				t.Errorf("said %q, want nothing", diag.String())
			case !tt.silent && len(lines) != len(tt.said):
				t.Errorf("said:\n%s\nwant %d lines", diag, len(tt.said))
			case !tt.silent:
				for i, want := range tt.said {
					if !strings.HasPrefix(lines[i], want) {
						t.Errorf("line %d: %q, want %q", i, lines[i], want)
					}
				}
			}
			if a.Restart.GPUFree <= 0 {
				t.Errorf("GPUFree %s, want when the check was over", a.Restart.GPUFree)
			}
			for _, n := range tt.nodes {
				if n.calls != 1 || n.req.Var != wire.RunIDVar || n.req.Value != "run1" || n.req.Timeout() != wire.DefaultGPUFreeTimeout {
					t.Errorf("%s: %d calls, last request %+v", n.name, n.calls, n.req)
				}
			}
		})
	}
}

// TestGPUFreeNotFreedError: the error names every node still held, with
// the PID, command and memory, and none that was freed.
func TestGPUFreeNotFreedError(t *testing.T) {
	g, plan, _ := gpuFreeHook(newGPUNode("a", heldAnswer, nil), newGPUNode("b", freedAnswer, nil), newGPUNode("c", heldAnswer, nil))
	err := g.BeforeAttempt(context.Background(), &Attempt{K: 2, Plan: plan})
	want := ErrGPUNotFreed.Error() + ":\n" +
		"node a: PID 77 python3 train.py (80000 MiB on GPU 0, killed) still held after 10s\n" +
		"node c: PID 77 python3 train.py (80000 MiB on GPU 0, killed) still held after 10s"
	if err == nil || err.Error() != want {
		t.Errorf("err:\n%v\nwant:\n%s", err, want)
	}
}

// TestGPUFreeNoGPUsOnce: a node without GPUs is not asked again, and the
// line is said once for the run.
func TestGPUFreeNoGPUsOnce(t *testing.T) {
	none, gpus := newGPUNode("a", noGPUsAnswer, nil), newGPUNode("b", cleanAnswer, nil)
	g, plan, diag := gpuFreeHook(none, gpus)
	for k := 1; k <= 3; k++ {
		if err := g.BeforeAttempt(context.Background(), &Attempt{K: k, Plan: plan}); err != nil {
			t.Fatal(err)
		}
	}
	if none.calls != 1 || gpus.calls != 3 {
		t.Errorf("calls: %d to the node without GPUs (want 1), %d to the other (want 3)", none.calls, gpus.calls)
	}
	if n := strings.Count(diag.String(), "no GPUs on"); n != 1 {
		t.Errorf("said %d times:\n%s", n, diag)
	}
	// Every node without GPUs: nothing asked, nothing timed.
	g, plan, diag = gpuFreeHook(newGPUNode("a", noGPUsAnswer, nil))
	g.BeforeAttempt(context.Background(), &Attempt{K: 1, Plan: plan})
	a := &Attempt{K: 2, Plan: plan, Restart: &launch.Restart{Failed: time.Now()}}
	g.BeforeAttempt(context.Background(), a)
	if a.Restart.GPUFree != 0 || strings.Count(diag.String(), "\n") != 1 {
		t.Errorf("second restart: GPUFree %s, said %q", a.Restart.GPUFree, diag)
	}
}

// TestGPUFreeFirstAttempt: nothing to check before the first attempt.
func TestGPUFreeFirstAttempt(t *testing.T) {
	n := newGPUNode("a", heldAnswer, nil)
	g, plan, _ := gpuFreeHook(n)
	if err := g.BeforeAttempt(context.Background(), &Attempt{K: 0, Plan: plan}); err != nil || n.calls != 0 {
		t.Errorf("attempt 0: %v, %d calls", err, n.calls)
	}
}

// TestGPUFreeInterrupted: a stop while the nodes are checked is an
// interruption, not a failed node.
func TestGPUFreeInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := newGPUNode("a", heldAnswer, nil)
	n.agent = func([]string) ([]byte, error) { cancel(); return nil, context.Canceled }
	g, plan, diag := gpuFreeHook(n)
	err := g.BeforeAttempt(ctx, &Attempt{K: 1, Plan: plan})
	if !errors.Is(err, launch.ErrInterrupted) || errors.Is(err, ErrRecheckFailed) || diag.Len() != 0 {
		t.Errorf("err = %v, said %q", err, diag)
	}
}

// TestGPUFreeBound: a node that does not answer is given up on once its
// bound and the slack have passed.
func TestGPUFreeBound(t *testing.T) {
	g, plan, diag := gpuFreeHook(newGPUNode("a", cleanAnswer, nil))
	var deadline time.Time
	g.runners["a"] = &deadlineRunner{fakeRunner: &fakeRunner{name: "a"}, seen: &deadline}
	if err := g.BeforeAttempt(context.Background(), &Attempt{K: 1, Plan: plan}); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(deadline); left < wire.DefaultGPUFreeTimeout || left > wire.DefaultGPUFreeTimeout+gpuFreeSlack {
		t.Errorf("the node's call had %s left, want its bound and the slack", left)
	}
	if !strings.Contains(diag.String(), "a: no deadline answer") {
		t.Errorf("said %q", diag)
	}
}

// deadlineRunner notes the deadline its AgentOutput was given.
type deadlineRunner struct {
	*fakeRunner
	seen *time.Time
}

func (d *deadlineRunner) AgentOutput(ctx context.Context, args ...string) ([]byte, error) {
	*d.seen, _ = ctx.Deadline()
	return nil, errors.New("no deadline answer")
}

// TestGPUFreeInRun: in a supervised run, every node's job carries the
// run's marker, and a node whose GPUs are not freed ends the run before
// the restart with the recheck's error.
func TestGPUFreeInRun(t *testing.T) {
	r, plan, node, _ := fakeRun(t, []string{"--max-restarts", "3"}, 1, 0)
	r.cfg.RunID = "run1"
	// launch writes its own lines from another goroutine meanwhile, as
	// to a terminal: one write each.
	diag := &lockedBuffer{}
	r.ui.Err = diag
	node.agent = func(args []string) ([]byte, error) { return []byte(heldAnswer), nil }
	hooks := []Hook{newGPUFree(r.cfg.RunID, r.conns, nil, r.ui.Err)}
	err := r.supervise(context.Background(), plan, hooks)
	if !errors.Is(err, ErrGPUNotFreed) || !errors.Is(err, ErrRecheckFailed) || !strings.Contains(err.Error(), "GPU teardown check: ") {
		t.Fatalf("supervise: %v\n%s", err, diag)
	}
	if len(node.jobs) != 1 || node.jobs[0].Env[wire.RunIDVar] != "run1" {
		t.Errorf("jobs %+v, want one, with %s=run1", node.jobs, wire.RunIDVar)
	}
}

// TestHooksOrder: the hang limits come first (they only configure and
// learn); the teardown check comes right after the flight
// recorder (and the hang stacks' hook, which only configures launch) and
// before the recheck; without a run id there is none.
func TestHooksOrder(t *testing.T) {
	cl := parse(t, "--hosts", "node0:1", "--flight-recorder", t.TempDir(), "--telemetry-interval", "0", "x.py")
	r := &run{cl: cl, cfg: Config{RunID: "run1"}, ui: UI{Err: &bytes.Buffer{}},
		spec: envplan.Spec{CommandLine: cl, Hosts: []hosts.Host{{Name: "node0", Slots: 1}}}}
	hs, err := r.hooks(outputs{}, "", envplan.Plan{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hs {
		names = append(names, h.Name())
	}
	if got, want := strings.Join(names, ", "), "hang limits, flight recorder, hang stacks, GPU teardown check, recheck, master port, goodput"; got != want {
		t.Errorf("hooks %s, want %s", got, want)
	}
	r.cfg.RunID = ""
	if hs, _ = r.hooks(outputs{}, "", envplan.Plan{}); len(hs) != 6 {
		t.Errorf("without a run id: %d hooks, want 6", len(hs))
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestGPUFreeSkipsNodesPreflightFoundWithoutGPUs: a node preflight saw
// with no GPU is never asked, and that is said once.
func TestGPUFreeSkipsNodesPreflightFoundWithoutGPUs(t *testing.T) {
	asked := false
	node := &fakeRunner{name: "cpu1", agent: func([]string) ([]byte, error) { asked = true; return []byte(`{"no_gpus":true}`), nil }}
	var diag bytes.Buffer
	g := newGPUFree("run1", map[string]sshexec.Runner{"cpu1": node}, envplan.Facts{"cpu1": {Hostname: "cpu1"}}, &diag)
	plan := envplan.Plan{Nodes: []envplan.NodePlan{{Host: "cpu1"}}}
	for k := 1; k <= 2; k++ {
		if err := g.BeforeAttempt(context.Background(), &Attempt{K: k, Plan: plan}); err != nil {
			t.Fatal(err)
		}
	}
	if asked {
		t.Error("a node preflight found without GPUs was asked")
	}
	if n := strings.Count(diag.String(), "no GPUs on 1 node (preflight); nothing to check"); n != 1 {
		t.Errorf("said %d times:\n%s", n, diag.String())
	}
}
