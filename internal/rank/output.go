package rank

import (
	"bytes"
	"io"

	"github.com/gorun/gorun/internal/wire"
)

// maxHeld bounds the bytes of a partial line held for its newline; past
// it the piece goes as it is (the head joins the pieces again where it
// prints lines whole).
const maxHeld = 64 << 10

// forward reads one of the worker's streams and sends its complete lines
// as frames, at most one frame per read, so a chatty worker costs a few
// large writes rather than one per line. A partial line waits for its
// newline unless it grows past maxHeld; the rest goes at the end.
func (w *worker) forward(kind byte, r io.Reader, echo io.Writer) {
	buf := make([]byte, 64<<10)
	var held []byte
	frame := wire.AppendRank(nil, w.localRank)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if echo != nil {
				_, _ = echo.Write(buf[:n])
			}
			if kind == wire.FrameErr && w.dump.take(held, buf[:n]) {
				held = held[:0] // faulthandler's dump: sent whole at the end (stacks.go)
			} else {
				held = append(held, buf[:n]...)
				cut := bytes.LastIndexByte(held, '\n') + 1
				if len(held)-cut > maxHeld {
					cut = len(held)
				}
				if cut > 0 {
					w.send(kind, append(frame[:4], held[:cut]...))
					held = held[:copy(held, held[cut:])]
				}
			}
		}
		if err != nil {
			if len(held) > 0 {
				w.send(kind, append(frame[:4], held...))
			}
			return
		}
	}
}
