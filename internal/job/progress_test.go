package job

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProgressLines: where stderr is no terminal, a long phase says how
// far it is in a line of its own each period, and nothing once it ends;
// on a terminal it redraws one line and erases it.
func TestProgressLines(t *testing.T) {
	var log syncBuf
	p := startProgressEvery(UI{Err: &log}, "preflight", "checked", 128, 20*time.Millisecond)
	p.set(37, 128)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(log.String(), "gorun: preflight: 37/128 nodes checked\n") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	p.end()
	if !strings.Contains(log.String(), "gorun: preflight: 37/128 nodes checked\n") {
		t.Fatalf("no progress line: %q", log.String())
	}
	if strings.Contains(log.String(), "\r") {
		t.Errorf("a line drawn in place in a log: %q", log.String())
	}
	after := log.String()
	time.Sleep(60 * time.Millisecond)
	if log.String() != after {
		t.Errorf("lines after the phase ended: %q", strings.TrimPrefix(log.String(), after))
	}

	var tty bytes.Buffer
	p = startProgressEvery(UI{Err: &tty, Live: true}, "preflight", "checked", 4, time.Hour)
	p.set(1, 4)
	p.set(4, 4)
	p.end()
	if want := "\rpreflight: 1/4 nodes checked\rpreflight: 4/4 nodes checked\r\x1b[K"; tty.String() != want {
		t.Errorf("terminal: %q, want %q", tty.String(), want)
	}
	if p := startProgressEvery(UI{Err: &tty, Live: true}, "preflight", "checked", 3, time.Hour); p != nil {
		t.Errorf("3 nodes on a terminal: a progress line")
	}
}
