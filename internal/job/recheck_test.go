package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// reportOf is a preflight report in which the named nodes fail with the
// finding id given.
func reportOf(nodes []hosts.Host, fails map[string]string) preflight.Report {
	var r preflight.Report
	for _, h := range nodes {
		n := preflight.NodeReport{Host: h.Name}
		if id := fails[h.Name]; id != "" {
			n.Findings = []preflight.Finding{{ID: id, Severity: preflight.SeverityFail, Message: id + " failed", Evidence: "seen"}}
		}
		r.Nodes = append(r.Nodes, n)
	}
	return r
}

func TestRecheck(t *testing.T) {
	three := []hosts.Host{{Name: "node0", Slots: 1}, {Name: "node1", Slots: 1}, {Name: "node2", Slots: 1}}
	for _, tc := range []struct {
		name      string
		args      []string
		fails     map[string]string // node → failing finding id, on every check
		wantHosts string            // the hosts of the next attempt; "" when it must not go on
		wantErr   error
		wantSaid  string
		wantCheck int // how many checks ran
	}{
		{"all well", []string{"--nnodes", "2:3"}, nil, "node0,node1,node2", nil, "", 1},
		{"a node lost, within the range", []string{"--nnodes", "2:3"}, map[string]string{"node1": "node.reach"},
			"node0,node2", nil, "gorun: dropping node1; the group restarts on 2 nodes (--nnodes 2:3)", 1},
		{"node 0 lost: the others checked again against the new master", []string{"--nnodes", "2:3"}, map[string]string{"node0": "node.reach"},
			"node1,node2", nil, "gorun: dropping node0", 2},
		{"no range", []string{"--nnodes", "3"}, map[string]string{"node2": "node.reach"},
			"", ErrRecheckFailed, "--nnodes gives no range", 1},
		{"below the minimum", []string{"--nnodes", "3:3"}, map[string]string{"node1": "node.reach"},
			"", ErrRecheckFailed, "", 1},
		{"too few left", []string{"--nnodes", "2:3"}, map[string]string{"node1": "node.reach", "node2": "node.reach"},
			"", ErrRecheckFailed, "only 1 nodes pass their checks, below --nnodes minimum 2", 1},
		{"a failed check counts with --preflight on", []string{"--nnodes", "2:3"}, map[string]string{"node2": "gpu.count"},
			"node0,node1", nil, "node2 fails its checks before the restart: gpu.count failed (seen)", 1},
		{"only reach counts with --preflight warn", []string{"--nnodes", "2:3", "--preflight", "warn"}, map[string]string{"node2": "gpu.count"},
			"node0,node1,node2", nil, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := parse(t, append(append([]string{"--hosts", "node0:1,node1:1,node2:1"}, tc.args...), "x.py")...)
			spec := envplan.Spec{CommandLine: cl, Hosts: three}
			plan, err := envplan.Build(spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			checks := 0
			var diag bytes.Buffer
			s := &recheck{cl: cl, diag: &diag, check: func(_ context.Context, nodes []hosts.Host) preflight.Report {
				checks++
				return reportOf(nodes, tc.fails)
			}}
			a := &Attempt{K: 1, Spec: spec, Plan: plan}
			err = s.BeforeAttempt(context.Background(), a)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantHosts != "" {
				var got []string
				for _, n := range a.Plan.Nodes {
					got = append(got, n.Host)
				}
				if strings.Join(got, ",") != tc.wantHosts || len(a.Spec.Hosts) != len(got) {
					t.Errorf("next attempt on %v (spec %d hosts), want %s", got, len(a.Spec.Hosts), tc.wantHosts)
				}
			}
			said := diag.String()
			if err != nil {
				said += err.Error()
			}
			if !strings.Contains(said, tc.wantSaid) {
				t.Errorf("diag and error lack %q:\n%s", tc.wantSaid, said)
			}
			if checks != tc.wantCheck {
				t.Errorf("%d checks ran, want %d", checks, tc.wantCheck)
			}
		})
	}
}

func TestRecheckFirstAttemptAndInterrupt(t *testing.T) {
	called := false
	s := &recheck{cl: parse(t, "x.py"), diag: &bytes.Buffer{}, check: func(context.Context, []hosts.Host) preflight.Report {
		called = true
		return preflight.Report{}
	}}
	if err := s.BeforeAttempt(context.Background(), &Attempt{K: 0}); err != nil || called {
		t.Errorf("attempt 0 rechecked: %v, %v", err, called)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.BeforeAttempt(ctx, &Attempt{K: 1, Spec: envplan.Spec{Hosts: []hosts.Host{{Name: "a"}}}})
	if !errors.Is(err, launch.ErrInterrupted) {
		t.Errorf("cancelled: %v, want ErrInterrupted", err)
	}
}

// TestRecheckThroughRealChecks runs the recheck through Check and
// fleet.Run against fake nodes: one answers, one cannot be reached.
func TestRecheckThroughRealChecks(t *testing.T) {
	cl := parse(t, "--hosts", "node0:1,node1:1", "--nnodes", "1:2", "--preflight", "warn", "x.py")
	nodes := []hosts.Host{{Name: "node0", Slots: 1}, {Name: "node1", Slots: 1}}
	spec := envplan.Spec{CommandLine: cl, Hosts: nodes}
	plan, _ := envplan.Build(spec, nil)
	ok := &fakeRunner{name: "node0", agent: func([]string) ([]byte, error) { return []byte(`{"hostname":"node0"}`), nil }}
	lost := &fakeRunner{name: "node1", agent: func([]string) ([]byte, error) { return nil, errors.New("connection lost") }}
	r := &run{cl: cl, cfg: noSlurm(), ui: UI{Err: &bytes.Buffer{}}, spec: spec,
		conns: map[string]sshexec.Runner{"node0": ok, "node1": lost}}
	a := &Attempt{K: 1, Spec: spec, Plan: plan, Restart: &launch.Restart{Failed: time.Now()}}
	if err := newRecheck(r).BeforeAttempt(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if len(a.Plan.Nodes) != 1 || a.Plan.Nodes[0].Host != "node0" {
		t.Errorf("next attempt: %+v", a.Plan.Nodes)
	}
	if a.Restart.Checked <= 0 {
		t.Errorf("the restart's timeline has no recheck: %+v", *a.Restart)
	}
}

// TestRecheckEarlyCheck: the recheck started as attempt 0 began to stop
// (Stopping) is the one the restart uses, run once, with a GPU busy with
// the stopping job's own processes not held against its node; a node it
// found lost is still dropped. A recheck started for another attempt, or
// other nodes, is not used.
func TestRecheckEarlyCheck(t *testing.T) {
	three := []hosts.Host{{Name: "node0", Slots: 1}, {Name: "node1", Slots: 1}, {Name: "node2", Slots: 1}}
	cl := parse(t, "--hosts", "node0:1,node1:1,node2:1", "--nnodes", "1:3", "x.py")
	spec := envplan.Spec{CommandLine: cl, Hosts: three}
	plan, err := envplan.Build(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	var checks atomic.Int32
	release := make(chan struct{})
	s := &recheck{cl: cl, diag: &bytes.Buffer{}, check: func(_ context.Context, nodes []hosts.Host) preflight.Report {
		checks.Add(1)
		<-release
		r := reportOf(nodes, map[string]string{"node2": "node.reach"})
		r.Nodes[1].Findings = []preflight.Finding{{ID: "gpu.busy", Severity: preflight.SeverityFail, Message: "GPU 0 is busy"}}
		return r
	}}
	s.Stopping(context.Background(), &Attempt{K: 0, Spec: spec, Plan: plan})
	close(release) // the check ends while the stop goes on
	a := &Attempt{K: 1, Spec: spec, Plan: plan}
	if err := s.BeforeAttempt(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if checks.Load() != 1 {
		t.Errorf("%d checks, want the early one only", checks.Load())
	}
	if got := hostNames(a.Spec.Hosts); strings.Join(got, ",") != "node0,node1" {
		t.Errorf("next attempt on %v, want node2 dropped and node1 kept (its GPU was the job's own)", got)
	}

	// Started after another attempt: the restart checks for itself (and
	// so node1's busy GPU counts).
	s.Stopping(context.Background(), &Attempt{K: 3, Spec: spec, Plan: plan})
	a = &Attempt{K: 1, Spec: spec, Plan: plan}
	if err := s.BeforeAttempt(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if got := hostNames(a.Spec.Hosts); strings.Join(got, ",") != "node0" {
		t.Errorf("the restart's own check: next attempt on %v, want node0 (node1's busy GPU counts now)", got)
	}
}

// TestRecheckWithSpares: before a restart the spares are checked with the
// nodes; a failing node's place goes to a ready spare (the other nodes
// keep theirs), and when none is left, the range shrinks or the run stops.
func TestRecheckWithSpares(t *testing.T) {
	three := []hosts.Host{{Name: "node0", Slots: 1}, {Name: "node1", Slots: 1}, {Name: "node2", Slots: 1}}
	for _, tc := range []struct {
		name      string
		nnodes    string
		fails     map[string]string
		wantHosts string
		wantErr   error
		wantSaid  []string
		wantCheck int
		wantCool  string // the nodes whose standby is stopped: those that leave, and failed spares
	}{
		{"node1 lost: the spare takes node rank 1", "3", map[string]string{"node1": "node.reach"}, "node0,node3,node2", nil,
			[]string{"gorun: node1 leaves the job (node.reach failed (seen)); spare node3 takes its place, node rank 1 (0 spares left)"}, 1, "node1"},
		{"node 0 lost: the spare is node 0, checked again as the master", "3", map[string]string{"node0": "node.reach"}, "node3,node1,node2", nil,
			[]string{"spare node3 takes its place, node rank 0"}, 2, "node0"},
		{"the spare fails too: the range shrinks", "2:3", map[string]string{"node1": "node.reach", "node3": "node.reach"}, "node0,node2", nil,
			[]string{"gorun: spare node3 fails its checks, so it is not used", "gorun: dropping node1; the group restarts on 2 nodes (--nnodes 2:3)"}, 1, "node1,node3"},
		{"the spare fails too, no range: the run stops", "3", map[string]string{"node1": "node.reach", "node3": "node.reach"}, "", ErrRecheckFailed,
			[]string{"gorun: node1 fails its checks before the restart", "--nnodes gives no range"}, 1, ""},
		{"only the spare fails: nothing changes", "3", map[string]string{"node3": "node.reach"}, "node0,node1,node2", nil,
			[]string{"gorun: spare node3 fails its checks, so it is not used"}, 1, "node3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := parse(t, "--hosts", "node0:1,node1:1,node2:1,node3:1", "--nnodes", tc.nnodes, "x.py")
			spec := envplan.Spec{CommandLine: cl, Hosts: three}
			plan, err := envplan.Build(spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			checks := 0
			var cooled []string
			var mu sync.Mutex
			var diag bytes.Buffer
			s := &recheck{cl: cl, diag: &diag, spares: &spares{ready: []hosts.Host{{Name: "node3", Slots: 1}}},
				check: func(_ context.Context, nodes []hosts.Host) preflight.Report {
					checks++
					return reportOf(nodes, tc.fails)
				},
				cool: func(node string) {
					mu.Lock()
					defer mu.Unlock()
					cooled = append(cooled, node)
				}}
			a := &Attempt{K: 1, Spec: spec, Plan: plan}
			err = s.BeforeAttempt(context.Background(), a)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v\n%s", err, tc.wantErr, diag.String())
			}
			if tc.wantHosts != "" {
				var got []string
				for _, n := range a.Plan.Nodes {
					got = append(got, n.Host)
				}
				if strings.Join(got, ",") != tc.wantHosts {
					t.Errorf("next attempt on %v, want %s\n%s", got, tc.wantHosts, diag.String())
				}
			}
			said := diag.String()
			if err != nil {
				said += err.Error()
			}
			for _, w := range tc.wantSaid {
				if !strings.Contains(said, w) {
					t.Errorf("diag and error lack %q:\n%s", w, said)
				}
			}
			if checks != tc.wantCheck {
				t.Errorf("%d checks ran, want %d", checks, tc.wantCheck)
			}
			if got := strings.Join(slices.Sorted(slices.Values(cooled)), ","); got != tc.wantCool {
				t.Errorf("standby stopped on %q, want %q", got, tc.wantCool)
			}
		})
	}
}

// TestSpareThroughRealChecks: through Check and fleet.Run, a spare
// that was never connected (no runner) fails as not reached, without
// asking anything, and is not used; a node whose connection is lost is
// replaced by the spare that answers.
func TestSpareThroughRealChecks(t *testing.T) {
	cl := parse(t, "--hosts", "node0:1,node1:1,node2:1,node3:1", "--nnodes", "2", "--preflight", "warn", "x.py")
	nodes := []hosts.Host{{Name: "node0", Slots: 1}, {Name: "node1", Slots: 1}}
	spec := envplan.Spec{CommandLine: cl, Hosts: nodes}
	plan, _ := envplan.Build(spec, nil)
	answers := func(name string) *fakeRunner {
		return &fakeRunner{name: name, agent: func([]string) ([]byte, error) { return []byte(`{"hostname":"` + name + `"}`), nil }}
	}
	lost := &fakeRunner{name: "node1", agent: func([]string) ([]byte, error) { return nil, errors.New("connection lost") }}
	var diag bytes.Buffer
	r := &run{cl: cl, cfg: noSlurm(), ui: UI{Err: &diag}, spec: spec,
		spares: &spares{ready: []hosts.Host{{Name: "node2", Slots: 1}, {Name: "node3", Slots: 1}}},
		conns:  map[string]sshexec.Runner{"node0": answers("node0"), "node1": lost, "node3": answers("node3")}}
	a := &Attempt{K: 1, Spec: spec, Plan: plan}
	if err := newRecheck(r).BeforeAttempt(context.Background(), a); err != nil {
		t.Fatalf("%v\n%s", err, diag.String())
	}
	var got []string
	for _, n := range a.Plan.Nodes {
		got = append(got, n.Host)
	}
	if strings.Join(got, ",") != "node0,node3" {
		t.Errorf("next attempt on %v, want node0,node3:\n%s", got, diag.String())
	}
	for _, w := range []string{"gorun: spare node2 fails its checks, so it is not used: not connected", "spare node3 takes its place, node rank 1"} {
		if !strings.Contains(diag.String(), w) {
			t.Errorf("diag lacks %q:\n%s", w, diag.String())
		}
	}
}

// TestRecheckTorch: a recheck asks every node for its torch, so that a
// node whose torch broke fails it (TestClusterSpareForFailedCheck has the
// real one); without preflight it asks none: that check is about reach
// and routes.
func TestRecheckTorch(t *testing.T) {
	for _, tc := range []struct {
		preflight string
		asked     bool
	}{{"on", true}, {"warn", true}, {"off", false}} {
		var asked []bool
		node0 := &fakeRunner{name: "node0", agent: func(args []string) ([]byte, error) {
			var req preflight.Request
			if err := json.Unmarshal([]byte(args[1]), &req); err != nil {
				return nil, err
			}
			asked = append(asked, !req.SkipTorch)
			return json.Marshal(preflight.Facts{Hostname: "node0"})
		}}
		cl := parse(t, "--hosts", "node0:1", "--preflight", tc.preflight, "x.py")
		runners := map[string]sshexec.Runner{"node0": node0}
		recheckNodes(context.Background(), cl, []hosts.Host{{Name: "node0", Slots: 1}}, runners, noSlurm(), nil)
		Check(context.Background(), cl, []hosts.Host{{Name: "node0", Slots: 1}}, runners, noSlurm(), UI{Err: &bytes.Buffer{}})
		if want := []bool{tc.asked, true}; !slices.Equal(asked, want) {
			t.Errorf("--preflight %s: torch asked for by the recheck, then the launch's check: %v, want %v", tc.preflight, asked, want)
		}
	}
}

// TestRecheckReadsTorchWhereFound: the launch's check finds each node's
// torch; a recheck asks the node to read it there (no interpreter), a
// node with nothing known is asked to look for it, and a node dialled
// again is looked at afresh.
func TestRecheckReadsTorchWhereFound(t *testing.T) {
	var asked []*preflight.TorchAt
	node0 := &fakeRunner{name: "node0", agent: func(args []string) ([]byte, error) {
		var req preflight.Request
		if err := json.Unmarshal([]byte(args[1]), &req); err != nil {
			return nil, err
		}
		asked = append(asked, req.TorchAt)
		return json.Marshal(preflight.Facts{Hostname: "node0",
			Torch: preflight.TorchFacts{Python: "/usr/bin/python3", Dir: "/usr/lib/python3/dist-packages/torch", Found: true, Version: "1.13.0a0"}})
	}}
	cl := parse(t, "--hosts", "node0:1", "--preflight", "on", "x.py")
	runners := map[string]sshexec.Runner{"node0": node0}
	nodes := []hosts.Host{{Name: "node0", Slots: 1}}
	var places torchPlaces
	places.learn(Check(context.Background(), cl, nodes, runners, noSlurm(), UI{Err: &bytes.Buffer{}}))
	recheckNodes(context.Background(), cl, nodes, runners, noSlurm(), places.known())
	places.forget("node0")
	recheckNodes(context.Background(), cl, nodes, runners, noSlurm(), places.known())
	want := preflight.TorchAt{Python: "/usr/bin/python3", Dir: "/usr/lib/python3/dist-packages/torch"}
	if len(asked) != 3 || asked[0] != nil || asked[1] == nil || *asked[1] != want || asked[2] != nil {
		t.Errorf("torch_at asked by the launch's check, a recheck, a recheck after a redial: %v; want nil, %+v, nil", asked, want)
	}
}
