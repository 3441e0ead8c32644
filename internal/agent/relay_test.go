package agent

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestRelayGate: a gated relay holds its clients until open, tells one
// that connects after it at once, and a stop before the release wins:
// its clients get the stop and never wire.RelayGo.
func TestRelayGate(t *testing.T) {
	dial := func(t *testing.T, r *relay) net.Conn {
		t.Helper()
		c, err := net.Dial("unix", r.path())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// read returns what reaches c within d.
	read := func(c net.Conn, d time.Duration) string {
		c.SetReadDeadline(time.Now().Add(d))
		b := make([]byte, 16)
		n, _ := c.Read(b)
		return string(b[:n])
	}
	newRelay := func(t *testing.T) *relay {
		t.Helper()
		r, err := startRelay(io.Discard, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.close)
		return r
	}

	t.Run("released", func(t *testing.T) {
		r := newRelay(t)
		r.gate()
		before := dial(t, r)
		if got := read(before, 100*time.Millisecond); got != "" {
			t.Fatalf("a gated client was told %q before the release", got)
		}
		if !r.open(nil) {
			t.Fatal("open: the relay was not gated")
		}
		if got := read(before, time.Second); got != string(wire.RelayGo) {
			t.Errorf("at the release the client got %q, want wire.RelayGo", got)
		}
		after := dial(t, r)
		if got := read(after, time.Second); got != string(wire.RelayGo) {
			t.Errorf("a client after the release got %q, want wire.RelayGo at once", got)
		}
		if r.open(nil) {
			t.Error("a second open reported a release")
		}
		if got := read(before, 100*time.Millisecond); got != "" {
			t.Errorf("a second open told %q", got)
		}
	})
	t.Run("stopped first", func(t *testing.T) {
		r := newRelay(t)
		r.gate()
		c := dial(t, r)
		for r.clients() == 0 {
			time.Sleep(time.Millisecond)
		}
		stop := []byte{wire.RelayStop, 15}
		r.stop(stop)
		if r.open(nil) {
			t.Error("open after the stop reported a release")
		}
		if got := read(c, time.Second); got != string(stop) {
			t.Errorf("stopped, then opened: the client got %q, want only the stop", got)
		}
		if got := read(dial(t, r), time.Second); got != string(stop) {
			t.Errorf("a client after the stop got %q, want the stop", got)
		}
	})
	t.Run("not gated", func(t *testing.T) {
		r := newRelay(t)
		if r.open(nil) {
			t.Error("open reported a release on a relay that had no gate")
		}
		if got := read(dial(t, r), 100*time.Millisecond); got != "" {
			t.Errorf("a client of an ungated relay got %q", got)
		}
	})
}

// TestRelayFlushesLineBufferedOutput: an agent that runs as a Slurm step
// ends each write with a frame holding a newline, so slurmstepd's line
// buffering passes every frame on at once; the frames decode as written,
// with wire.FrameFlush between them, and flushFrame is wire.FrameFlush's frame.
func TestRelayFlushesLineBufferedOutput(t *testing.T) {
	if string(wire.AppendFrame(nil, wire.FrameFlush, []byte{'\n'})) != flushFrame {
		t.Fatalf("flushFrame %q is not wire.FrameFlush's frame", flushFrame)
	}
	var out writesRecorder
	r := &relay{out: &out, lineBuffered: true}
	r.write(wire.AppendFrame(nil, 'i', []byte{0, 0, 0, 1})) // a worker joined the store: no newline in it
	r.write(wire.AppendFrame(nil, wire.FrameStdout, []byte("a line\n")))
	var all []byte
	for i, w := range out.writes {
		if i%2 == 1 && string(w) != flushFrame {
			t.Errorf("write %d is %q, want the flush frame after each write", i, w)
		}
		all = append(all, w...)
	}
	var kinds []byte
	d := wire.NewFrameDecoder(func(kind byte, _ []byte) { kinds = append(kinds, kind) })
	d.Write(all)
	if string(kinds) != "inOn" {
		t.Errorf("frames %q, want i n O n", kinds)
	}
	out.writes = nil
	(&relay{out: &out}).write(wire.AppendFrame(nil, 'i', []byte{0, 0, 0, 1}))
	if len(out.writes) != 1 {
		t.Errorf("not line-buffered: %d writes, want the frame alone", len(out.writes))
	}
}

// TestRelayStopReachesLateClients: a client that connects after the
// stop's tell (a worker's supervisor that torchrun started just before it
// was frozen) gets the tell once as it connects, and one connected before
// gets it once too.
func TestRelayStopReachesLateClients(t *testing.T) {
	r, err := startRelay(&bytes.Buffer{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	dial := func() net.Conn {
		c, err := net.Dial("unix", r.path())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	early := dial()
	defer early.Close()
	for deadline := time.Now().Add(5 * time.Second); r.clients() < 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := r.stop([]byte{wire.RelayStop, 2}); n != 1 {
		t.Fatalf("stop told %d clients, want 1", n)
	}
	late := dial()
	defer late.Close()
	for name, c := range map[string]net.Conn{"early": early, "late": late} {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		got, _ := io.ReadAll(c) // until the deadline: every byte told
		if !bytes.Equal(got, []byte{wire.RelayStop, 2}) {
			t.Errorf("%s client was told %q, want the stop once", name, got)
		}
	}
}

// writesRecorder keeps each Write as it came.
type writesRecorder struct{ writes [][]byte }

func (w *writesRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}
