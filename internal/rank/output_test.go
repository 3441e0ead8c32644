package rank

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/term"
	"github.com/gorun/gorun/internal/wire"
)

// TestCoalescePTY: a flood read from a pseudo-terminal (which passes at
// most 4 KiB a read) is gathered by coalesce into one buffer of what came
// within coalesceWait; the bytes are kept as written.
func TestCoalescePTY(t *testing.T) {
	tty, master, err := term.OpenPTY(80, 24)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer master.Close()
	want := bytes.Repeat([]byte("0123456789abcde\n"), 1024) // 16 KiB
	go func() { tty.Write(want); tty.Close() }()
	time.Sleep(50 * time.Millisecond) // all of it in the terminal's buffers
	buf := make([]byte, 64<<10)
	n, err := master.Read(buf)
	if err != nil || n < ptyFlood || n >= len(want) {
		t.Fatalf("first read: %d bytes, %v; want a terminal's few KiB of %d", n, err, len(want))
	}
	m, _ := coalesce(master, buf, n)
	if m <= n {
		t.Errorf("coalesce gathered nothing past the first %d bytes", n)
	}
	rest, _ := io.ReadAll(master)
	if got := append(buf[:m:m], rest...); !bytes.Equal(got, want) {
		t.Errorf("read %d bytes, want the %d written, as written", len(got), len(want))
	}
	if !isTTY(master) {
		t.Error("a pty master is not taken for a terminal")
	}
}

// TestForwardCoalescesPrints: a worker writing a line a write, each soon
// after the last (print() in a loop under python -u), costs a frame per
// batch, not per line, on a pipe and on a pseudo-terminal, even where the
// reader keeps up with every write; every byte arrives once, in order.
func TestForwardCoalescesPrints(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func() (r, w *os.File, err error)
	}{
		{"pipe", os.Pipe},
		{"pty", func() (*os.File, *os.File, error) {
			tty, master, err := term.OpenPTY(80, 24)
			return master, tty, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, wr, err := tc.open()
			if err != nil {
				t.Skipf("cannot open one: %v", err)
			}
			agent, conn := net.Pipe()
			w := &worker{conn: conn, connOK: true}
			var got bytes.Buffer
			frames := 0
			dec := wire.NewFrameDecoder(func(kind byte, p []byte) {
				if _, rest, err := wire.SplitRank(p); err == nil && kind == wire.FrameOut {
					frames++
					got.Write(rest)
				}
			})
			decoded := make(chan struct{})
			go func() { io.Copy(dec, agent); close(decoded) }()
			done := make(chan struct{})
			go func() { w.forward(wire.FrameOut, r, nil, false, false); close(done) }()

			const lines = 1000
			var want bytes.Buffer
			for i := range lines {
				line := fmt.Sprintf("line %05d of a print() flood\n", i)
				want.WriteString(line)
				if _, err := wr.WriteString(line); err != nil {
					t.Fatal(err)
				}
				for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
					// the reader keeps up: uncoalesced, a read a line
				}
			}
			wr.Close()
			<-done
			conn.Close()
			<-decoded
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("got %d bytes, want the %d written, as written", got.Len(), want.Len())
			}
			// Without coalescing a reader that keeps up takes a line a read
			// (807-994 frames in three runs of this test);
			// 2 ms batches of lines 50 us apart hold dozens.
			if frames > lines/2 {
				t.Errorf("%d lines came in %d frames; want them gathered (at most %d)", lines, frames, lines/2)
			}
			t.Logf("%d lines in %d frames", lines, frames)
		})
	}
}
