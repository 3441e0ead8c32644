package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// recorder is a hook that writes down every call it gets, in one log
// shared by all recorders.
type recorder struct {
	name      string
	log       *[]string
	mu        *sync.Mutex
	failAt    int // BeforeAttempt fails for this attempt (-1: never)
	finishErr error
}

func (h *recorder) Name() string { return h.name }

func (h *recorder) note(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.log = append(*h.log, h.name+" "+fmt.Sprintf(format, args...))
}

func (h *recorder) BeforeAttempt(_ context.Context, a *Attempt) error {
	h.note("before %d (nodes %v)", a.K, a.Nodes != nil)
	if a.K == h.failAt {
		return errors.New("refused")
	}
	return nil
}
func (h *recorder) Starting(a *Attempt)                   { h.note("starting %d with %d nodes", a.K, len(a.Nodes)) }
func (h *recorder) AttemptFailed(k int, f launch.Failure) { h.note("failed %d on %s", k, f.Node) }
func (h *recorder) Configure(o *launch.Options)           { h.note("configure") }
func (h *recorder) Finish(_ context.Context, a *Attempt, res launch.Result, err error) error {
	h.note("finish after %d attempts", res.Attempts)
	return h.finishErr
}

// fakeRun is a run on fake nodes that exit with the given codes, attempt
// after attempt.
func fakeRun(t *testing.T, args []string, codes ...int) (*run, envplan.Plan, *fakeRunner, *bytes.Buffer) {
	t.Helper()
	cl := parse(t, append([]string{"--hosts", "node0:1"}, append(args, "x.py")...)...)
	spec := envplan.Spec{CommandLine: cl, Hosts: []hosts.Host{{Name: "node0", Slots: 1}}}
	plan, err := envplan.Build(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	node := &fakeRunner{name: "node0", codes: codes}
	var diag bytes.Buffer
	r := &run{cl: cl, cfg: noSlurm(), ui: UI{Out: &bytes.Buffer{}, Err: &diag}, spec: spec,
		conns: map[string]sshexec.Runner{"node0": node}}
	return r, plan, node, &diag
}

// TestHookOrder: every hook in list order at each step, the jobs built
// between BeforeAttempt and Starting, a failed attempt heard before the
// restart, Finish once at the end.
func TestHookOrder(t *testing.T) {
	r, plan, node, diag := fakeRun(t, []string{"--max-restarts", "1"}, 1, 0)
	var log []string
	var mu sync.Mutex
	hooks := []Hook{&recorder{name: "A", log: &log, mu: &mu, failAt: -1}, &recorder{name: "B", log: &log, mu: &mu, failAt: -1}}
	if err := r.supervise(context.Background(), plan, hooks); err != nil {
		t.Fatalf("supervise: %v\n%s", err, diag)
	}
	want := []string{
		"A configure", "B configure",
		"A before 0 (nodes false)", "B before 0 (nodes false)", "A starting 0 with 1 nodes", "B starting 0 with 1 nodes",
		"A failed 0 on node0", "B failed 0 on node0",
		"A before 1 (nodes false)", "B before 1 (nodes false)", "A starting 1 with 1 nodes", "B starting 1 with 1 nodes",
		"A finish after 2 attempts", "B finish after 2 attempts",
	}
	if strings.Join(log, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
	if len(node.jobs) != 2 || node.jobs[1].Env[wire.RestartCountVar] != "1" {
		t.Errorf("jobs: %+v", node.jobs)
	}
	if !strings.Contains(diag.String(), "restarting the whole group (attempt 2 of 2)") {
		t.Errorf("diag = %s", diag)
	}
}

// TestHookErrors: a BeforeAttempt error ends the run with the hook's name
// and no further hook or attempt; every Finisher runs and their errors
// are joined; a Finish error fails a job that succeeded, and is said
// beside a job that failed.
func TestHookErrors(t *testing.T) {
	var log []string
	var mu sync.Mutex
	r, plan, node, _ := fakeRun(t, []string{"--max-restarts", "1"}, 1, 0)
	hooks := []Hook{&recorder{name: "A", log: &log, mu: &mu, failAt: 1}, &recorder{name: "B", log: &log, mu: &mu, failAt: -1}}
	err := r.supervise(context.Background(), plan, hooks)
	if err == nil || !strings.Contains(err.Error(), "A: refused") {
		t.Fatalf("err = %v", err)
	}
	if len(node.jobs) != 1 {
		t.Errorf("%d attempts started, want 1", len(node.jobs))
	}
	for _, l := range log {
		if l == "B before 1 (nodes false)" {
			t.Error("B ran after A refused")
		}
	}

	errA, errB := errors.New("disk full"), errors.New("read-only")
	r, plan, _, diag := fakeRun(t, nil, 0)
	hooks = []Hook{&recorder{name: "A", log: &log, mu: &mu, failAt: -1, finishErr: errA}, &recorder{name: "B", log: &log, mu: &mu, failAt: -1, finishErr: errB}}
	err = r.supervise(context.Background(), plan, hooks)
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Errorf("a succeeded job whose outputs failed: %v", err)
	}

	r, plan, _, diag = fakeRun(t, nil, 7)
	hooks = []Hook{&recorder{name: "A", log: &log, mu: &mu, failAt: -1, finishErr: errA}}
	err = r.supervise(context.Background(), plan, hooks)
	var failed *launch.JobFailed
	if !errors.As(err, &failed) || failed.ExitCode() != 7 {
		t.Errorf("the job's own failure must win: %v", err)
	}
	if !strings.Contains(diag.String(), "gorun: A: disk full") {
		t.Errorf("the Finish error is not said: %s", diag)
	}
}

// TestKillContext: the context ends when kill is closed (a second
// Ctrl-C), not before, and with its cancel; a nil kill never ends it.
func TestKillContext(t *testing.T) {
	kill := make(chan struct{})
	ctx, cancel := killContext(context.Background(), kill)
	defer cancel()
	select {
	case <-ctx.Done():
		t.Fatal("ended before kill was closed")
	case <-time.After(50 * time.Millisecond):
	}
	close(kill)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not ended 5 s after kill was closed")
	}
	ctx, cancel = killContext(context.Background(), nil)
	if ctx.Err() != nil {
		t.Fatal("a nil kill ended the context at once")
	}
	cancel()
	if ctx.Err() == nil {
		t.Fatal("cancel did not end the context")
	}
}

func TestLocalRanks(t *testing.T) {
	if got := localRanks("0, 2"); len(got) != 2 || got[1] != 2 {
		t.Errorf("localRanks = %v", got)
	}
	if localRanks("") != nil {
		t.Error("no filter must show every rank")
	}
}

func TestNewRunID(t *testing.T) {
	a, b := newRunID(), newRunID()
	if len(a) != 12 || a == b {
		t.Errorf("run ids %q, %q: want 12 hex digits, different each time", a, b)
	}
}
