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
// checkpoint without printing is not hung), a checkpoint when the
// checkpoint file is touched, and once, that the worker joined the
// rendezvous store (it holds a connection to MASTER_PORT), which ends its
// start-up.
func (w *worker) watch(ctx context.Context, pid int, files watched, storePort int) {
	joined := storePort <= 0
	store := newJoinWatch(pid, storePort)
	every := pollEvery
	if !joined {
		every = pollJoining
	}
	t := time.NewTicker(every)
	defer t.Stop()
	heartbeat, checkpoint := touches(files.heartbeat), touches(files.checkpoint)
	written, _ := writtenBytes(pid)
	for {
		select {
		case <-ctx.Done():
			// A checkpoint just before the worker's end still counts:
			// its crash loses only what came after.
			if checkpoint.touched() {
				w.send(wire.FrameCheckpoint, checkpoint.frame(w.localRank))
			}
			return
		case <-t.C:
		}
		if !joined && store.joined() {
			joined = true
			w.send(wire.FrameInit, wire.AppendRank(nil, w.localRank))
			t.Reset(pollEvery)
		}
		progress := heartbeat.touched()
		if n, ok := writtenBytes(pid); ok && n > written {
			written, progress = n, true
		}
		switch {
		case checkpoint.touched():
			w.send(wire.FrameCheckpoint, checkpoint.frame(w.localRank)) // progress too
		case progress:
			w.send(wire.FrameProgress, wire.AppendRank(nil, w.localRank))
		}
	}
}

// touchWatch is a file a worker touches, and when it was last seen touched.
type touchWatch struct {
	path string
	last time.Time
}

func touches(path string) *touchWatch {
	t := &touchWatch{path: path}
	if fi, err := os.Stat(path); path != "" && err == nil {
		t.last = fi.ModTime()
	}
	return t
}

// frame is a wire.FrameCheckpoint's payload for the last touch: the local
// rank, then how long ago the touch was, in nanoseconds, as text (an age,
// not a time: the head's clock may not be the node's).
func (t *touchWatch) frame(localRank int) []byte {
	return strconv.AppendInt(wire.AppendRank(nil, localRank), max(0, int64(time.Since(t.last))), 10)
}

// touched reports whether the file was touched since the last look.
func (t *touchWatch) touched() bool {
	if t.path == "" {
		return false
	}
	fi, err := os.Stat(t.path)
	if err != nil || !fi.ModTime().After(t.last) {
		return false
	}
	t.last = fi.ModTime()
	return true
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
