package rank

import (
	"io"

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
	for {
		n, err := r.Read(buf)
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
