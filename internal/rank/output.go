package rank

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/gorun/gorun/internal/wire"
)

// forward reads one of the worker's streams and sends what each read
// returns as one frame, at once: a chatty worker costs a few large writes
// rather than one per line, and a partial line (a progress bar's "\r"
// update) is not held back. The head joins the pieces of a line again
// where it prints lines whole, and decides when a partial line is shown
// (launch/lines.go).
// The stream that carries the worker's stderr (capture) holds
// faulthandler's dump back while one is asked for.
func (w *worker) forward(kind byte, r io.Reader, echo io.Writer, capture bool) {
	buf := make([]byte, 64<<10)
	frame := wire.AppendRank(nil, w.localRank)
	tty, _ := r.(*os.File)
	if tty != nil && !isTTY(tty) {
		tty = nil
	}
	for {
		n, err := r.Read(buf)
		if tty != nil && err == nil && n >= ptyFlood {
			n, err = coalesce(tty, buf, n)
		}
		if n > 0 {
			if echo != nil {
				_, _ = echo.Write(buf[:n])
			}
			if !capture || !w.dump.take(buf[:n]) { // faulthandler's dump: sent whole at the end (stacks.go)
				w.send(kind, append(frame[:4], buf[:n]...))
			}
		}
		if err != nil {
			return
		}
	}
}

// ptyCoalesce is how long a read of a pseudo-terminal that came back
// with at least ptyFlood bytes (a flood: the terminal passes at most 4 KiB
// a read where a pipe passes 64) waits for more of the worker's output
// before it is sent, so a flood costs a frame per 64 KiB, not per 4. A
// read of less, a line or a prompt, goes at once.
const (
	ptyCoalesce = 2 * time.Millisecond
	ptyFlood    = 2 << 10
)

// coalesce reads more of f into buf after its first n bytes, for up to
// ptyCoalesce or until buf is full; it returns the bytes in buf, and an
// error of the stream's own (its end) to stop at after sending them.
func coalesce(f *os.File, buf []byte, n int) (int, error) {
	if err := f.SetReadDeadline(time.Now().Add(ptyCoalesce)); err != nil {
		return n, nil
	}
	defer f.SetReadDeadline(time.Time{})
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func isTTY(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	tty := false
	rc.Control(func(fd uintptr) { tty = term.IsTerminal(int(fd)) })
	return tty
}
