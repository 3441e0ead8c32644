package job

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progressEvery is how often a long phase says how far it is where
// stderr is no terminal (a Slurm log, a pod's): one line each time.
const progressEvery = 10 * time.Second

// liveFrom is the node count from which a phase's progress is drawn in
// place on a terminal: fewer end before it would be read.
const liveFrom = 4

// phaseProgress tells how far a phase over many nodes is ("preflight:
// 37/128 nodes checked"): on a live terminal redrawn in place as each
// node is done; elsewhere one line every progressEvery while the phase
// lasts, so a log shows that gorun is working, and on what.
type phaseProgress struct {
	w     io.Writer
	live  bool
	what  string // "preflight", as the line begins
	verb  string // "checked"
	total int

	mu    sync.Mutex
	done  int
	drawn bool          // a live line is on the terminal
	stop  chan struct{} // closed by end; nil: no ticker
	ended sync.WaitGroup
}

// startProgress starts telling the progress of a phase over total nodes;
// nil (telling nothing) when there is nothing to wait for. end must be
// called once the phase is over.
func startProgress(ui UI, what, verb string, total int) *phaseProgress {
	return startProgressEvery(ui, what, verb, total, progressEvery)
}

// startProgressEvery is startProgress with lines every period apart.
func startProgressEvery(ui UI, what, verb string, total int, every time.Duration) *phaseProgress {
	if total == 0 || ui.Err == nil || ui.Err == io.Discard || ui.Live && total < liveFrom {
		return nil
	}
	p := &phaseProgress{w: ui.Err, live: ui.Live, what: what, verb: verb, total: total}
	if !p.live {
		p.stop = make(chan struct{})
		p.ended.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					p.mu.Lock()
					fmt.Fprintf(p.w, "gorun: %s: %d/%d nodes %s\n", p.what, p.done, p.total, p.verb)
					p.mu.Unlock()
				case <-p.stop:
					return
				}
			}
		})
	}
	return p
}

// set says that done nodes are done.
func (p *phaseProgress) set(done, _ int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	if p.live {
		fmt.Fprintf(p.w, "\r%s: %d/%d nodes %s", p.what, done, p.total, p.verb)
		p.drawn = true
	}
}

// end stops telling, and erases a live line.
func (p *phaseProgress) end() {
	if p == nil {
		return
	}
	if p.stop != nil {
		close(p.stop)
		p.ended.Wait()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}
