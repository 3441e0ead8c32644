package job

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/launch"
)

func TestMasterPortMovesOffAHeldPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	cl := parse(t, "--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "x.py")
	plan, err := envplan.Build(envplan.Spec{CommandLine: cl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var diag bytes.Buffer
	m := &masterPort{diag: &diag}

	a := &Attempt{K: 0, Plan: plan}
	m.BeforeAttempt(context.Background(), a)
	if p, _ := a.Plan.MasterPort(); p != port {
		t.Errorf("attempt 0 moved the port to %d", p)
	}
	a.K = 1
	if err := m.BeforeAttempt(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	p, _ := a.Plan.MasterPort()
	if p == port || p > port+portSearch {
		t.Errorf("restart on port %d, want one above the held %d", p, port)
	}
	if !strings.Contains(diag.String(), "is still held; the group restarts on port "+strconv.Itoa(p)) {
		t.Errorf("diag = %q", diag.String())
	}

	// A free port stays.
	ln.Close()
	diag.Reset()
	a = &Attempt{K: 1, Plan: plan}
	m.BeforeAttempt(context.Background(), a)
	if p, _ := a.Plan.MasterPort(); p != port || diag.Len() != 0 {
		t.Errorf("free port: moved to %d, said %q", p, diag.String())
	}
	// A plan with no master port (c10d without one) is left alone.
	a = &Attempt{K: 1}
	if err := m.BeforeAttempt(context.Background(), a); err != nil {
		t.Error(err)
	}
}

// TestMasterPortAhead: the hand-off ahead takes a port above the one the
// failing attempt's torchrun holds and free now, also on one local node
// that uses torchrun's default port (placed on its command line); the
// next attempt keeps it, unchecked, when its jobs were handed ahead, and
// checks its plan's own port as ever when none was.
func TestMasterPortAhead(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0") // the failing attempt's store
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	next, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1)) // taken by something else
	if err != nil {
		t.Skipf("port %d: %v", port+1, err)
	}
	defer next.Close()
	cl := parse(t, "--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "x.py")
	plan, err := envplan.Build(envplan.Spec{CommandLine: cl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &masterPort{diag: &bytes.Buffer{}}
	q, ok := m.ahead(context.Background(), plan, 0)
	got, _ := q.MasterPort()
	if !ok || got <= port+1 || got > port+1+portSearch {
		t.Fatalf("ahead = port %d, %v; want one above %d and %d, which are held", got, ok, port, port+1)
	}
	if q.Nodes[0].Env["MASTER_PORT"].Value != strconv.Itoa(got) {
		t.Errorf("MASTER_PORT %+v, want %d", q.Nodes[0].Env["MASTER_PORT"], got)
	}
	// The next attempt, its jobs handed ahead: that port, though the
	// torchruns handed ahead hold it by then.
	a := &Attempt{K: 1, Plan: plan, Restart: &launch.Restart{Ahead: 1}}
	m.BeforeAttempt(context.Background(), a)
	if p, _ := a.Plan.MasterPort(); p != got {
		t.Errorf("handed ahead: the next attempt meets at %d, want %d", p, got)
	}
	// None handed: its own port, checked (free by then).
	held.Close()
	a = &Attempt{K: 1, Plan: plan, Restart: &launch.Restart{}}
	m.BeforeAttempt(context.Background(), a)
	if p, _ := a.Plan.MasterPort(); p != port {
		t.Errorf("nothing handed ahead: the next attempt meets at %d, want its own %d", p, port)
	}

	// One local node on torchrun's default port: the port is placed.
	local, err := envplan.Build(envplan.Spec{CommandLine: parse(t, "--nproc-per-node", "2", "x.py")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := local.MasterPort(); ok {
		t.Fatal("the local plan has a port on its command line already")
	}
	lq, ok := m.ahead(context.Background(), local, 0)
	lp, placed := lq.MasterPort()
	if !ok || !placed || lp <= 29500 {
		t.Errorf("local: ahead = %d (%v, %v), want a port above torchrun's default on the command line", lp, ok, placed)
	}
}
