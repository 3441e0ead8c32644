package job

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/sshexec"
)

// redialEvery is the pause between two tries to reach a lost node again:
// the keepalive interval, so a node back on the network is found within
// about one interval and a dial's own timeout.
const redialEvery = 3 * time.Second

// sweepTimeout bounds the sweep of a node that answers again.
const sweepTimeout = 30 * time.Second

// redial brings back nodes whose SSH connection was lost: from the
// restart that finds such a node out of the job (replaced, dropped, or a
// spare that failed), it is dialled again in the background, every
// redialEvery, until it answers or the run ends. A node that answers is
// taken in at the next restart (take): what is left of the job there is
// killed (a sweep, `gorun _gpufree` with Sweep), its new runner replaces
// the lost one, and the recheck decides, as for any other node, whether
// it is a spare again.
type redial struct {
	// connect dials one node (Connect for it alone).
	connect func(ctx context.Context, h hosts.Host) (sshexec.Runner, error)
	runID   string
	fanout  int // nodes swept at once (0: sshexec.DefaultFanout)

	quit    chan struct{} // closed when the run ends (stop)
	stopped sync.Once

	mu      sync.Mutex
	pending map[string]bool           // nodes being dialled
	back    map[string]sshexec.Runner // dialled, not yet taken
}

func newRedial(r *run) *redial {
	return &redial{runID: r.cfg.RunID, fanout: r.cl.Gorun.Fanout, quit: make(chan struct{}), pending: map[string]bool{}, back: map[string]sshexec.Runner{},
		connect: func(ctx context.Context, h hosts.Host) (sshexec.Runner, error) {
			conns, err := Connect(ctx, r.cl, []hosts.Host{h}, r.cfg, UI{Err: io.Discard})
			if err != nil {
				return nil, err
			}
			return conns[h.Name], nil
		}}
}

// lost reports whether a runner's connection is gone for good (an SSH
// connection that ended): a node not connected at all counts too. Srun
// steps and the head's own runner are never lost.
func lost(r sshexec.Runner) bool {
	if r == nil {
		return true
	}
	l, ok := r.(interface{ Lost() error })
	return ok && l.Lost() != nil
}

// start dials h again in the background until it answers or ctx ends;
// a node already being dialled, or back and not yet taken, is left.
func (d *redial) start(ctx context.Context, h hosts.Host) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[h.Name] || d.back[h.Name] != nil {
		return
	}
	d.pending[h.Name] = true
	go func() {
		defer func() {
			d.mu.Lock()
			delete(d.pending, h.Name)
			d.mu.Unlock()
		}()
		for {
			r, err := d.connect(ctx, h)
			if err == nil && r != nil {
				d.mu.Lock()
				defer d.mu.Unlock()
				select {
				case <-d.quit:
					r.Close() // too late: nothing takes it
				default:
					d.back[h.Name] = r
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-d.quit:
				return
			case <-time.After(redialEvery):
			}
		}
	}()
}

// stop ends the dialling, and closes what was dialled and not taken.
func (d *redial) stop() {
	if d == nil {
		return
	}
	d.stopped.Do(func() { close(d.quit) })
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, r := range d.back {
		r.Close()
		delete(d.back, name)
	}
}

// take returns the nodes that answered again since the last take, each
// swept of what is left of the job there, with the lines that say so.
// A node whose sweep cannot run, or finds the job still there, is closed
// again, and dialled anew from the next restart on.
func (d *redial) take(ctx context.Context) (back map[string]sshexec.Runner, lines []string) {
	if d == nil {
		return nil, nil
	}
	d.mu.Lock()
	back, d.back = d.back, map[string]sshexec.Runner{}
	d.mu.Unlock()
	if len(back) == 0 {
		return nil, nil
	}
	req, _ := json.Marshal(wire.GPUFreeRequest{Var: wire.RunIDVar, Value: d.runID, Sweep: true, TimeoutSeconds: wire.DefaultGPUFreeTimeout.Seconds()})
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	names := slices.Sorted(maps.Keys(back))
	said := make([]string, len(names))
	swept := make([]bool, len(names)) // false too for a node not asked (ctx ended first)
	// Each call writes its own slots; back is only read meanwhile.
	sshexec.ForEach(ctx, names, d.fanout, func(ctx context.Context, name string) error {
		i, _ := slices.BinarySearch(names, name)
		said[i], swept[i] = sweepLine(ctx, name, back[name], req, d.runID != "")
		return nil
	})
	for i, name := range names {
		if said[i] != "" {
			lines = append(lines, said[i])
		}
		if !swept[i] {
			back[name].Close()
			delete(back, name)
		}
	}
	return back, lines
}

// sweepLine sweeps the node through r and says what it found; ok is false
// when the node could not be asked, or the job still holds it.
func sweepLine(ctx context.Context, name string, r sshexec.Runner, req []byte, marked bool) (line string, ok bool) {
	if !marked { // no run id: the job's processes cannot be told apart
		return fmt.Sprintf("gorun: %s answers again; it is checked with the spares", name), true
	}
	out, err := r.AgentOutput(ctx, wire.GPUFreeCommand, string(req))
	var ans wire.GPUFreeAnswer
	if err == nil {
		err = json.Unmarshal(out, &ans)
	}
	if err != nil {
		return fmt.Sprintf("gorun: %s answers again, but what is left of the job there cannot be checked: %s; it is not used",
			name, userr.Printable(err.Error())), false
	}
	var killed []string
	for _, p := range ans.Swept {
		killed = append(killed, fmt.Sprintf("PID %d %s", p.PID, p.Command))
	}
	for _, g := range ans.GPUs {
		for _, p := range g.Processes {
			if p.Job && p.Killed {
				killed = append(killed, processText(p, g.Index))
			}
		}
	}
	switch {
	case len(ans.Errors) > 0 || !ans.Free:
		return fmt.Sprintf("gorun: %s answers again, but the job's processes there could not all be stopped (%s); it is not used",
			name, userr.Printable(strings.Join(append(killed, ans.Errors...), "; "))), false
	case len(killed) > 0:
		return fmt.Sprintf("gorun: %s answers again; what was left of the job there is killed: %s", name, userr.Printable(strings.Join(killed, ", "))), true
	}
	return fmt.Sprintf("gorun: %s answers again; nothing of the job is left there", name), true
}
