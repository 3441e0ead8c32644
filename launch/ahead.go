package launch

import (
	"sync"
	"time"

	"github.com/gorun/gorun/sshexec"
)

// The hand-off ahead (Options.Ahead): while attempt k runs, if a failure
// would restart the group at once (the first restart after a worker's
// failure), the next attempt's jobs go to the nodes' agents on standby
// as soon as each is in place. Each node's next torchrun then runs its
// main, meets at its store and starts its workers' supervisors, which
// wait at the gate (wire.Job.Gated) for as long as the attempt runs;
// the next attempt's start releases them, and the run's end stops them
// with their standby. What a restart still waits for after the stop is
// the release and the workers' own start. A node whose standby comes
// only when the attempt is stopped (a crash at start-up) is handed its
// job then, beside the stop.

// aheadState is an attempt's hand-off ahead, once begun.
type aheadState struct {
	done chan struct{} // closed when every node's hand-off is over
	over chan struct{} // closed when the attempt has ended: a node whose standby is not in place by then is not handed
	mu   sync.Mutex
	n    int       // nodes handed their jobs
	at   time.Time // when the last was
}

// handAhead begins the hand-off ahead of attempt k+1, once, if the run
// asks for it, a restart is left and it will not pause first: as the
// attempt starts. Each node is handed its job once its standby is in
// place, until the attempt ends. A node lost (or not started) by the
// time of the call gets none: the group will likely change.
func (sv *supervisor) handAhead() {
	if sv.opts.Ahead == nil || sv.ahead != nil || sv.interrupted || sv.attempt >= sv.opts.MaxRestarts ||
		backoff(sv.opts, sv.attempt+1, false) > 0 {
		return
	}
	if f := sv.nodeFailure; f != nil && f.Code == -1 {
		return
	}
	st := &aheadState{done: make(chan struct{}), over: make(chan struct{})}
	sv.ahead = st
	byName := make(map[string]*member, len(sv.ms))
	for _, m := range sv.ms {
		byName[m.node.Name] = m
	}
	ctx, opts, k := sv.ctx, sv.opts, sv.attempt
	go func() {
		defer close(st.done)
		var wg sync.WaitGroup
		for _, n := range opts.Ahead(ctx, k) {
			h, ok := n.Runner.(sshexec.AheadHander)
			m := byName[n.Name]
			if !ok || m == nil || m.warmed == nil || m.node.Runner != n.Runner {
				continue
			}
			wg.Go(func() {
				select {
				case <-m.warmed: // its standby is in place (the hand-off needs no more: it waits for its interpreter)
				case <-st.over:
					return
				}
				if h.HandAhead(attemptJob(opts, n.Job)) {
					st.mu.Lock()
					st.n++
					st.at = time.Now()
					st.mu.Unlock()
				}
			})
		}
		wg.Wait()
	}()
}

// aheadWait ends the hand-off ahead, if one began: a node not handed
// by now is not, and the start finds its standby as ever. It returns how
// many nodes were handed their jobs and when the last was.
func (sv *supervisor) aheadWait() (int, time.Time) {
	st := sv.ahead
	if st == nil {
		return 0, time.Time{}
	}
	close(st.over)
	<-st.done
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.n, st.at
}
