package rank

import (
	"context"
	"os"
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

// watch reports progress when the heartbeat file is touched, and once,
// that the worker joined the rendezvous store (it holds a connection to
// MASTER_PORT), which ends its start-up.
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
		if heartbeat != "" {
			if fi, err := os.Stat(heartbeat); err == nil && fi.ModTime().After(last) {
				last = fi.ModTime()
				w.send(wire.FrameProgress, wire.AppendRank(nil, w.localRank))
			}
		}
	}
}
