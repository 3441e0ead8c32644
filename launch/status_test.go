package launch

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestStatusLine: the status line is erased before output and drawn again
// after it, lines are counted, and it is gone at the end.
func TestStatusLine(t *testing.T) {
	var term bytes.Buffer
	var counts []int64
	st := newStatusLine(&term, func(c Counts) string {
		counts = append(counts, c.Lines)
		return fmt.Sprintf("gorun: %d lines", c.Lines)
	}, nil, false)
	clock := time.Unix(0, 0)
	st.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	s := newSink(st)
	s.message(&term, "one\ntwo\n")
	s.refresh()
	s.message(&term, "three\n")
	s.close()
	got := term.String()
	// Whatever the timing, the status is erased before output, never
	// split from it, counts lines, and is gone at the end.
	clean := regexp.MustCompile(`gorun: \d+ lines\r\x1b\[K`).ReplaceAllString(got, "")
	if clean != "one\ntwo\nthree\n" {
		t.Errorf("output without the status lines = %q (all: %q)", clean, got)
	}
	if !strings.HasSuffix(got, "gorun: 3 lines\r\x1b[K") {
		t.Errorf("terminal = %q, want the last status to count 3 lines and be erased", got)
	}
}

func TestNoStatusLineWithoutWriter(t *testing.T) {
	if newStatusLine(nil, func(Counts) string { return "x" }, nil, false) != nil {
		t.Error("a status line without a terminal")
	}
	var out bytes.Buffer
	s := newSink(nil)
	s.refresh()
	s.message(&out, "a\n")
	s.close()
	if out.String() != "a\n" {
		t.Errorf("got %q", out.String())
	}
}

// TestRunTelemetryAndFailed: sidecar frames reach Options.Telemetry with
// the node and attempt, and Options.Failed hears of the failed attempt.
func TestRunTelemetryAndFailed(t *testing.T) {
	tframe := func(s string) timedFrame {
		return timedFrame{after: 5 * ms, frame: wire.AppendFrame(nil, wire.FrameTelemetry, []byte(s))}
	}
	failing := script{after: 50 * ms, code: 3, frames: []timedFrame{tframe("a")}}
	done := script{after: 50 * ms, frames: []timedFrame{tframe("b")}}
	c := &cluster{plan: [][]script{{done, failing}, {done, done}}}
	var mu sync.Mutex
	var got, fails []string
	var diag syncBuffer
	res, err := Run(context.Background(), Options{Attempt: c.attempt, MaxRestarts: 1, Backoff: ms,
		Diag: &diag,
		Telemetry: func(node string, k int, p []byte) string {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("%s/%d/%s", node, k, p))
			if string(p) == "a" {
				return "gorun: node2 gpu0: said\n"
			}
			return ""
		},
		Failed: func(k int, f Failure) { fails = append(fails, fmt.Sprintf("%d %s", k, f.Node)) },
	})
	if err != nil || res.Attempts != 2 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	slices.Sort(got)
	if want := []string{"node1/0/b", "node1/1/b", "node2/0/a", "node2/1/b"}; !slices.Equal(got, want) {
		t.Errorf("telemetry = %q, want %q", got, want)
	}
	if !strings.Contains(diag.String(), "gorun: node2 gpu0: said\n") {
		t.Errorf("diag = %q, want the telemetry message", diag.String())
	}
	if want := []string{"0 node2"}; !slices.Equal(fails, want) {
		t.Errorf("failed = %q, want %q", fails, want)
	}
}
