package job

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/envplan"
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
