package rank

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// How often the supervisor looks at the heartbeat file, and at the
// worker's connection to the store until it has joined: often at first,
// since a worker may crash a moment after it joined, and the phase of its
// failure should still be right.
const (
	pollEvery   = time.Second
	pollJoining = 50 * time.Millisecond
)

// watch reports progress when the heartbeat file is touched or the worker
// wrote something (its write count in /proc/PID/io grew: a rank writing a
// checkpoint without printing is not hung), and once, that the worker
// joined the rendezvous store (it holds a connection to MASTER_PORT),
// which ends its start-up.
func (w *worker) watch(ctx context.Context, pid int, heartbeat string, storePort int) {
	joined := storePort <= 0
	every := pollEvery
	if !joined {
		every = pollJoining
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last time.Time
	if fi, err := os.Stat(heartbeat); err == nil {
		last = fi.ModTime()
	}
	written, _ := writtenBytes(pid)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !joined && connectedTo(pid, storePort) {
			joined = true
			w.send(wire.FrameInit, wire.AppendRank(nil, w.localRank))
			t.Reset(pollEvery)
		}
		progress := false
		if heartbeat != "" {
			if fi, err := os.Stat(heartbeat); err == nil && fi.ModTime().After(last) {
				last, progress = fi.ModTime(), true
			}
		}
		if n, ok := writtenBytes(pid); ok && n > written {
			written, progress = n, true
		}
		if progress {
			w.send(wire.FrameProgress, wire.AppendRank(nil, w.localRank))
		}
	}
}

// writtenBytes is what process pid has passed to write(2) and its kin so
// far (wchar in /proc/PID/io: files on any filesystem, pipes, sockets);
// false when it cannot be read.
func writtenBytes(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
