package job

import (
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
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// lostRunner is a fakeRunner whose connection is gone.
type lostRunner struct{ *fakeRunner }

func (lostRunner) Lost() error { return errors.New("connection lost") }

// TestRedial: a node whose connection is lost is dialled again until it
// answers; at the next take its leftovers are swept (the request asks for
// a sweep of this run's processes) and said, and a node whose sweep
// fails is closed and not handed back.
func TestRedial(t *testing.T) {
	var mu sync.Mutex
	tries := map[string]int{}
	var asked []wire.GPUFreeRequest
	answer := map[string]wire.GPUFreeAnswer{
		"n1": {NoGPUs: true, Free: true, Swept: []wire.GPUProcess{{PID: 42, Command: "python train.py", Job: true, Killed: true}}},
		"n2": {NoGPUs: true, Free: true},
		"n3": {Free: true, Errors: []string{"kill PID 7 stuck: operation not permitted"}},
	}
	runners := map[string]*fakeRunner{}
	d := &redial{runID: "run1", quit: make(chan struct{}), pending: map[string]bool{}, back: map[string]sshexec.Runner{},
		connect: func(_ context.Context, h hosts.Host) (sshexec.Runner, error) {
			mu.Lock()
			defer mu.Unlock()
			tries[h.Name]++
			if h.Name == "n2" && tries[h.Name] < 2 {
				return nil, errors.New("connect: no route to host")
			}
			r := &fakeRunner{name: h.Name, agent: func(args []string) ([]byte, error) {
				var req wire.GPUFreeRequest
				if len(args) != 2 || args[0] != wire.GPUFreeCommand || json.Unmarshal([]byte(args[1]), &req) != nil {
					t.Errorf("asked %q", args)
				}
				mu.Lock()
				asked = append(asked, req)
				mu.Unlock()
				return json.Marshal(answer[h.Name])
			}}
			runners[h.Name] = r
			return r, nil
		}}
	defer d.stop()
	for _, n := range []string{"n1", "n2", "n3"} {
		d.start(context.Background(), hosts.Host{Name: n})
	}
	d.start(context.Background(), hosts.Host{Name: "n1"}) // already being dialled: no second loop
	deadline := time.Now().Add(redialEvery + 5*time.Second)
	for {
		d.mu.Lock()
		n := len(d.back)
		d.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d nodes back (tries %v)", redialEvery+5*time.Second, n, tries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	back, lines := d.take(context.Background())
	if len(back) != 2 || back["n1"] == nil || back["n2"] == nil {
		t.Errorf("back = %v, want n1 and n2", back)
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{
		"gorun: n1 answers again; what was left of the job there is killed: PID 42 python train.py",
		"gorun: n2 answers again; nothing of the job is left there",
		"gorun: n3 answers again, but the job's processes there could not all be stopped (kill PID 7 stuck: operation not permitted); it is not used",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lines lack %q:\n%s", want, got)
		}
	}
	if !runners["n3"].closed || runners["n1"].closed {
		t.Error("want n3's new runner closed, n1's open")
	}
	if tries["n1"] != 1 || tries["n2"] != 2 {
		t.Errorf("tries = %v, want n1 once, n2 twice", tries)
	}
	for _, r := range asked {
		if !r.Sweep || r.Var != wire.RunIDVar || r.Value != "run1" {
			t.Errorf("sweep request %+v", r)
		}
	}
	if back, lines := d.take(context.Background()); len(back) != 0 || len(lines) != 0 {
		t.Errorf("second take: %v %q", back, lines)
	}
}

// TestRecheckRedialsLostNodes: a node that leaves the job with its
// connection lost is dialled again; once it answers, the next restart
// puts its new runner in the run's and checks it again, and a node that
// passes is a spare again.
func TestRecheckRedialsLostNodes(t *testing.T) {
	cl := parse(t, "--hosts", "node0:1,node1:1,node2:1,node3:1", "--nnodes", "3", "x.py")
	three := []hosts.Host{{Name: "node0", Slots: 1}, {Name: "node1", Slots: 1}, {Name: "node2", Slots: 1}}
	conns := map[string]sshexec.Runner{"node0": &fakeRunner{name: "node0"}, "node1": lostRunner{&fakeRunner{name: "node1"}},
		"node2": &fakeRunner{name: "node2"}, "node3": &fakeRunner{name: "node3"}}
	dialled := make(chan string, 4)
	fresh := &fakeRunner{name: "node1", agent: func([]string) ([]byte, error) { return json.Marshal(wire.GPUFreeAnswer{NoGPUs: true, Free: true}) }}
	var diag strings.Builder
	s := &recheck{cl: cl, diag: &diag, spares: &spares{ready: []hosts.Host{{Name: "node3", Slots: 1}}}, conns: conns,
		redial: &redial{runID: "run1", quit: make(chan struct{}), pending: map[string]bool{}, back: map[string]sshexec.Runner{},
			connect: func(_ context.Context, h hosts.Host) (sshexec.Runner, error) {
				dialled <- h.Name
				return fresh, nil
			}},
		check: func(_ context.Context, nodes []hosts.Host) preflight.Report {
			fails := map[string]string{}
			if _, isLost := conns["node1"].(lostRunner); isLost {
				fails["node1"] = "node.reach"
			}
			return reportOf(nodes, fails)
		}}
	defer s.redial.stop()
	spec := envplan.Spec{CommandLine: cl, Hosts: three}
	plan, err := envplan.Build(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &Attempt{K: 1, Spec: spec, Plan: plan}
	if err := s.BeforeAttempt(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-dialled:
		if name != "node1" {
			t.Fatalf("dialled %s, want node1", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("node1 is not dialled again")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.redial.mu.Lock()
		n := len(s.redial.back)
		s.redial.mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
	}
	a.K = 2
	if err := s.BeforeAttempt(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if conns["node1"] != fresh {
		t.Errorf("node1's runner was not replaced by the new one")
	}
	for _, want := range []string{"spare node3 takes its place, node rank 1", "gorun: node1 answers again; nothing of the job is left there",
		"gorun: node1 passes its checks again: a spare now"} {
		if !strings.Contains(diag.String(), want) {
			t.Errorf("diag lacks %q:\n%s", want, diag.String())
		}
	}
}
