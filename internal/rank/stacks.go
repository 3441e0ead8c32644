package rank

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/wire"
)

// dumpStacks prints the worker's Python stacks for every thread: with
// py-spy when it is on the PATH (the worker lives on), else through
// Python's faulthandler, armed by PYTHONFAULTHANDLER, on SIGABRT (the
// worker dies: a hung attempt is being stopped anyway).
func (w *worker) dumpStacks(ctx context.Context, pid int) {
	if spy, err := exec.LookPath("py-spy"); err == nil {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(dctx, spy, "dump", "--pid", strconv.Itoa(pid)).CombinedOutput()
		cancel()
		if err == nil {
			var b []byte
			for _, l := range strings.SplitAfter(string(out), "\n") {
				if l != "" {
					b = append(b, "py-spy: "...)
					b = append(b, l...)
				}
			}
			if len(b) > 0 && b[len(b)-1] != '\n' {
				b = append(b, '\n')
			}
			w.send(wire.FrameErr, append(wire.AppendRank(nil, w.localRank), b...))
			w.send(wire.FrameDumped, wire.AppendRank(nil, w.localRank))
			return
		}
	}
	w.markStopped()
	_ = unix.Kill(pid, syscall.SIGABRT)
}
