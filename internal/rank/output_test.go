package rank

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/term"
)

// TestCoalescePTY: a flood read from a pseudo-terminal (which passes at
// most 4 KiB a read) is gathered by coalesce into one buffer of what came
// within ptyCoalesce; the bytes are kept as written.
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
