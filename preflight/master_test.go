package preflight

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// freeAddr is a loopback address nothing listens on (a port just freed).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestProbeMaster(t *testing.T) {
	ctx := context.Background()
	t.Run("listening", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		f := ProbeMaster(ctx, MasterProbe{Addr: l.Addr().String(), From: "PET_MASTER_ADDR, PET_MASTER_PORT", Wait: 5 * time.Second})
		if f.ID != "net.master" || f.Severity != SeverityOK || !strings.Contains(f.Message, "accepts TCP") || strings.Contains(f.Message, "tries") {
			t.Errorf("finding %+v", f)
		}
	})
	t.Run("the master comes later", func(t *testing.T) {
		addr := freeAddr(t)
		go func() {
			time.Sleep(1500 * time.Millisecond)
			if l, err := net.Listen("tcp", addr); err == nil {
				t.Cleanup(func() { l.Close() })
			}
		}()
		f := ProbeMaster(ctx, MasterProbe{Addr: addr, From: "x", Wait: 10 * time.Second})
		if f.Severity != SeverityOK || !strings.Contains(f.Message, "tries") {
			t.Errorf("finding %+v, want ok after some tries", f)
		}
	})
	t.Run("nothing listens: bounded, a warning with the remedy", func(t *testing.T) {
		addr := freeAddr(t)
		start := time.Now()
		f := ProbeMaster(ctx, MasterProbe{Addr: addr, From: "PET_MASTER_ADDR, PET_MASTER_PORT", Wait: 2 * time.Second})
		took := time.Since(start)
		if took < 2*time.Second || took > 4*time.Second {
			t.Errorf("took %v with a 2 s wait", took)
		}
		if f.Severity != SeverityWarn || !strings.Contains(f.Message, addr) || !strings.Contains(f.Message, "within 2s") ||
			!strings.Contains(f.Evidence, "refused") || !strings.Contains(f.Remedy, "node 0") {
			t.Errorf("finding %+v", f)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		f := ProbeMaster(ctx, MasterProbe{Addr: freeAddr(t), From: "x", Wait: time.Minute})
		if took := time.Since(start); took > 2*time.Second || f.Severity != SeverityWarn {
			t.Errorf("%v after cancel: %+v", took, f)
		}
	})
}
