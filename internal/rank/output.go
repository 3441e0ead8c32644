package rank

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/term"

	"github.com/gorun/gorun/internal/stepscan"
	"github.com/gorun/gorun/internal/wire"
)

// forward reads one of the worker's streams and sends what each read
// returns as one frame, at once: a chatty worker costs a few large writes
// rather than one per line, and a partial line (a progress bar's "\r"
// update) is not held back. The head joins the pieces of a line again
// where it prints lines whole, and decides when a partial line is shown
// (launch/lines.go).
// The stream that carries the worker's stderr (capture) holds
// faulthandler's dump back while one is asked for. A quiet stream
// (--redirects) goes to echo alone: no line of it reaches the head, as
// none reaches torchrun's console (a dump asked for still does).
func (w *worker) forward(kind byte, r *os.File, echo io.Writer, capture, quiet bool) {
	buf := make([]byte, 64<<10)
	frame := wire.AppendRank(nil, w.localRank)
	flood := pipeFlood
	if isTTY(r) {
		flood = ptyFlood
	}
	var last time.Time // when the previous read returned
	for {
		n, err := r.Read(buf)
		if err == nil {
			now := time.Now()
			if n >= flood || now.Sub(last) < coalesceWait {
				n, err = coalesce(r, buf, n)
				now = time.Now()
			}
			last = now
		}
		if n > 0 {
			if echo != nil {
				_, _ = echo.Write(buf[:n])
			}
			if !capture || !w.dump.take(buf[:n]) { // faulthandler's dump: sent whole at the end (stacks.go)
				if !quiet {
					w.send(kind, append(frame[:4], buf[:n]...))
				}
				w.steps.Scan(buf[:n], time.Now()) // what --redirects keeps off the console too
			}
		}
		if err != nil {
			return
		}
	}
}

// coalesceWait is how long a read waits for more of the worker's output
// before it is sent, when the worker is writing fast: the read came back
// with at least the stream's flood size (a pseudo-terminal passes at most
// 4 KiB a read, a pipe 64 KiB), or within coalesceWait of the read before
// (print() under python -u: a write, and without this a frame, per line).
// A flood then costs a frame per 64 KiB, not per 4 KiB or per line:
// print() floods reach 0.78-0.92 of what a bare pseudo-terminal passes
// (0.50-0.57 without) and 0.64-0.80 of a bare pipe (0.37-0.47 without;
// docs/BENCHMARKS.md). A line or a prompt after a quiet moment goes at once.
const (
	coalesceWait = 2 * time.Millisecond
	ptyFlood     = 2 << 10
	pipeFlood    = 16 << 10
)

// coalesce reads more of f into buf after its first n bytes, for up to
// coalesceWait or until buf is full; it returns the bytes in buf, and an
// error of the stream's own (its end) to stop at after sending them.
func coalesce(f *os.File, buf []byte, n int) (int, error) {
	if err := f.SetReadDeadline(time.Now().Add(coalesceWait)); err != nil {
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

// stepScanner reads the worker's output for its steps and checkpoints as
// the head's patterns say (wire.StepsVar: none when unset), and tells the
// head each step that advances and each checkpoint line, with how long
// ago it was written.
func (w *worker) stepScanner(patterns string) *stepscan.Scanner {
	p, err := stepscan.Decode(patterns)
	if err != nil {
		fmt.Fprintf(w.stderr, "gorun %s: no training steps read: %v\n", wire.RankCommand, err)
		return nil
	}
	rank := wire.AppendRank(nil, w.localRank)
	return stepscan.New(p, func(n int64, at time.Time) {
		w.send(wire.FrameStep, fmt.Appendf(slices.Clip(rank), "%d %d", n, time.Since(at).Nanoseconds()))
	}, func(at time.Time) {
		w.send(wire.FrameCheckpoint, fmt.Appendf(slices.Clip(rank), "%d", time.Since(at).Nanoseconds()))
	})
}
