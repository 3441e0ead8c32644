package rank

import (
	"os"
	"syscall"

	"github.com/gorun/gorun/internal/wire"
)

// awaitGate holds the worker of a job handed ahead (wire.GateVar: the
// next attempt's torchrun started while the last attempt runs or stops)
// until the node agent releases it (wire.RelayGo), with everything
// but the worker's start done. It returns 0 then. When the job is
// stopped instead it returns the stop's signal: told by the agent, or a
// stop signal sent to this process (torchrun's own stop); when the agent
// is gone, SIGKILL. Other signals that come meanwhile are dropped: sent
// while the attempt before runs (a `pkill -USR1 -f train.py`, a step's
// signal), they were for its workers, and a worker started after them,
// as torchrun's own restart starts its workers, never has them.
func (w *worker) awaitGate(sigs chan os.Signal) syscall.Signal {
	type word struct {
		sig syscall.Signal // 0: go
		err error
	}
	words := make(chan word, 1)
	go func() {
		// One byte at a time, so nothing after the release is read here:
		// listen reads the rest.
		var b [1]byte
		next := func() (byte, error) {
			_, err := w.conn.Read(b[:])
			return b[0], err
		}
		for {
			c, err := next()
			if err != nil {
				words <- word{err: err}
				return
			}
			switch c {
			case wire.RelayGo:
				words <- word{}
				return
			case wire.RelayStop, wire.RelayHad, wire.RelaySignal:
				n, err := next()
				if err != nil {
					words <- word{err: err}
					return
				}
				if c != wire.RelaySignal { // a passed signal finds no worker yet
					words <- word{sig: syscall.Signal(n)}
					return
				}
			case wire.TellResize:
				for c != ';' && err == nil { // its size: the worker's terminal takes the size it starts with
					c, err = next()
				}
			}
		}
	}()
	for {
		select {
		case wd := <-words:
			if wd.err != nil {
				return syscall.SIGKILL
			}
			if wd.sig != 0 {
				return wd.sig
			}
			for { // what came before the release, and was not read yet
				select {
				case s := <-sigs:
					if isStopSignal(s) {
						return s.(syscall.Signal)
					}
				default:
					return 0
				}
			}
		case s := <-sigs:
			if isStopSignal(s) {
				return s.(syscall.Signal)
			}
		}
	}
}
