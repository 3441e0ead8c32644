package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/preflight"
)

// agentFunc is a fake node: it answers the collector's request.
type agentFunc func(ctx context.Context, args ...string) ([]byte, error)

func (f agentFunc) AgentOutput(ctx context.Context, args ...string) ([]byte, error) {
	return f(ctx, args...)
}

func answer(facts preflight.Facts) agentFunc {
	return func(ctx context.Context, args ...string) ([]byte, error) {
		return json.Marshal(facts)
	}
}

func TestRun(t *testing.T) {
	var asked preflight.Request
	healthy := func(ctx context.Context, args ...string) ([]byte, error) {
		if len(args) != 2 || args[0] != wire.CollectCommand {
			t.Errorf("args = %q, want [%s REQUEST]", args, wire.CollectCommand)
		}
		if err := json.Unmarshal([]byte(args[1]), &asked); err != nil {
			t.Errorf("request: %v", err)
		}
		return json.Marshal(preflight.Facts{Hostname: "n0", CPUCount: 4})
	}
	wedged := func(ctx context.Context, args ...string) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	down := func(ctx context.Context, args ...string) ([]byte, error) {
		return nil, errors.New("connection refused")
	}
	garbled := func(ctx context.Context, args ...string) ([]byte, error) { return []byte("{"), nil }

	targets := []Target{
		{Host: "n0", Agent: agentFunc(healthy)},
		{Host: "n1", Agent: agentFunc(wedged)},
		{Host: "n2", Agent: agentFunc(down)},
		{Host: "n3", Agent: agentFunc(garbled)},
		{Host: "n4", Agent: answer(preflight.Facts{Hostname: "n4", Stalled: []preflight.Stall{{Step: "nvml", Seconds: 20}}})},
	}
	var progress []int
	start := time.Now()
	rep := Run(context.Background(), targets, RunOptions{
		Request:     preflight.Request{Torchrun: "torchrun", Script: "train.py"},
		NodeTimeout: 300 * time.Millisecond,
		Progress:    func(done, total int) { progress = append(progress, done) },
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Run took %v with a 300ms node timeout", took)
	}
	if rep.OK {
		t.Error("report OK with a wedged, a down and a stalled node")
	}
	if asked.Script != "train.py" || asked.BudgetSeconds <= 0 || asked.BudgetSeconds >= 0.3 {
		t.Errorf("request = %+v, want the script and a budget under the node timeout", asked)
	}
	if len(progress) != len(targets) || progress[len(progress)-1] != len(targets) {
		t.Errorf("progress = %v", progress)
	}
	want := map[string]string{"n1": "node.timeout", "n2": "node.reach", "n3": "node.reach", "n4": "collect.stalled"}
	for _, n := range rep.Nodes {
		id := ""
		if len(n.Findings) > 0 && n.Findings[0].Severity == preflight.SeverityFail {
			id = n.Findings[0].ID
		}
		if id != want[n.Host] {
			t.Errorf("%s: first fail = %q, want %q (%+v)", n.Host, id, want[n.Host], n.Findings)
		}
		if id != "" && !strings.Contains(n.Findings[0].Message, n.Host) {
			t.Errorf("%s: %q does not name the node", n.Host, n.Findings[0].Message)
		}
	}
}

func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	wedged := agentFunc(func(ctx context.Context, args ...string) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	rep := Run(ctx, []Target{{Host: "a", Agent: wedged}, {Host: "b", Agent: wedged}}, RunOptions{})
	// 100 ms to the cancel, then at once; 3 s leaves room for -race on a
	// loaded machine.
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Run returned %v after the cancel", took)
	}
	for _, n := range rep.Nodes {
		if n.Findings[0].ID != "node.reach" {
			t.Errorf("%s: %+v", n.Host, n.Findings)
		}
	}
}

func TestRouteTarget(t *testing.T) {
	for _, tt := range []struct {
		name, master, node0, addr string
		want                      string
		port                      int
	}{
		{"user's master address wins", "10.0.0.9", "n0", "10.0.0.1:22", "10.0.0.9", 0},
		{"address ssh reached", "", "n0", "10.0.0.1:2222", "10.0.0.1", 2222},
		{"ipv6", "", "n0", "[fd00::1]:22", "fd00::1", 22},
		{"node 0 is this machine", "", "n0", "", "n0", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, port := RouteTarget(tt.master, tt.node0, tt.addr)
			if got != tt.want || port != tt.port {
				t.Errorf("RouteTarget = %q, %d; want %q, %d", got, port, tt.want, tt.port)
			}
		})
	}
}

// TestRunMasterProbe: the master probe's finding joins the first node's.
func TestRunMasterProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String() // nothing listens there once l is closed
	l.Close()
	rep := Run(context.Background(), []Target{{Host: "localhost", Agent: answer(preflight.Facts{Hostname: "pod-1"})}},
		RunOptions{Master: &preflight.MasterProbe{Addr: addr, From: "x", Wait: time.Second}})
	found := false
	for _, f := range rep.Nodes[0].Findings {
		found = found || f.ID == "net.master" && f.Severity == preflight.SeverityWarn
	}
	if !found {
		t.Errorf("the node's findings have no net.master warning: %+v", rep.Nodes[0].Findings)
	}
}
