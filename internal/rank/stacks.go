package rank

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/pystack"
	"github.com/gorun/gorun/internal/wire"
)

// dumpStacks sends the worker's Python stacks for every thread, read into
// a pystack.Dump with the source text of each frame's line read here on
// the node (wire.FrameStacks): with py-spy when it is on the PATH (the
// worker lives on; native frames too where py-spy can), else through
// Python's faulthandler, armed by PYTHONFAULTHANDLER, on SIGABRT (the
// worker dies: a hung attempt is being stopped anyway). faulthandler
// writes to the worker's stderr: from the signal on, that stream is held
// (stackCapture) until the worker is gone, then the dump goes as one
// frame (sendCaptured) and any other line it held as output.
func (w *worker) dumpStacks(ctx context.Context, pid int) {
	if spy, err := exec.LookPath("py-spy"); err == nil {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := pySpy(dctx, spy, pid)
		cancel()
		if err == nil {
			d, perr := pystack.ParsePySpy(out)
			if perr != nil {
				d = pystack.Dump{Tool: pystack.ToolPySpy, Text: string(out)}
			}
			w.sendStacks(d)
			w.send(wire.FrameDumped, wire.AppendRank(nil, w.localRank))
			return
		}
	}
	w.dump.start()
	w.markStopped()
	_ = unix.Kill(pid, syscall.SIGABRT)
}

// pySpy runs `py-spy dump --json`, with native frames first and without
// them where that fails (a py-spy built without unwinding, a process it
// cannot unwind).
func pySpy(ctx context.Context, spy string, pid int) ([]byte, error) {
	p := strconv.Itoa(pid)
	out, err := exec.CommandContext(ctx, spy, "dump", "--json", "--native", "--pid", p).Output()
	if err == nil || ctx.Err() != nil {
		return out, err
	}
	return exec.CommandContext(ctx, spy, "dump", "--json", "--pid", p).Output()
}

// sendStacks fills in the dump's source lines from the files here (a
// relative name is relative to this directory, the worker's too) and
// sends it, cut to fit one frame, without the pool's frames.
func (w *worker) sendStacks(d pystack.Dump) {
	if w.pool != "" {
		// A pooled worker's stack goes on under its script in the pool's
		// shim, which lives beside the pool's socket; python's does not.
		d.DropDir(filepath.Dir(w.pool))
	}
	pystack.AddSource(&d, func(name string) (io.ReadCloser, error) {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, os.ErrInvalid // a FIFO or device would block or never end
		}
		return f, nil
	})
	d.Fit(wire.MaxFrame - 4)
	w.send(wire.FrameStacks, append(wire.AppendRank(nil, w.localRank), wire.JSON(d)...))
}

// sendCaptured sends what faulthandler wrote, once the worker is gone:
// the dump as a frame of its own, the other lines held since the signal
// as the worker's stderr. It does nothing unless a dump was asked for
// through faulthandler.
func (w *worker) sendCaptured() {
	text, ok := w.dump.stop()
	if !ok {
		return
	}
	d, rest := pystack.ParseFaulthandler(text)
	w.sendStacks(d)
	if rest != "" {
		w.send(wire.FrameErr, append(wire.AppendRank(nil, w.localRank), rest...))
	}
}

// maxCapture bounds what the worker's stderr may hold after SIGABRT: a
// full faulthandler dump (100 threads of 100 frames) is about 1 MiB.
const maxCapture = 2 << 20

// stackCapture holds the worker's stderr while faulthandler dumps.
type stackCapture struct {
	mu    sync.Mutex
	on    bool // from start to stop
	asked bool // start was called
	held  []byte
}

func (c *stackCapture) start() {
	c.mu.Lock()
	c.on, c.asked = true, true
	c.mu.Unlock()
}

// take holds p and reports true while the capture is on.
func (c *stackCapture) take(p []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return false
	}
	if n := min(len(p), maxCapture-len(c.held)); n > 0 {
		c.held = append(c.held, p[:n]...)
	}
	return true
}

// stop ends the capture and returns what it held; ok is false when no
// dump was asked for.
func (c *stackCapture) stop() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	s := string(c.held)
	c.held = nil
	return s, c.asked
}
