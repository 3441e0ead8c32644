package launch

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/wire"
)

// attemptState is where an attempt stands, as its supervisor sees it. An
// attempt starts running and only moves forward:
//
//	running ─► hung: waiting for RAS ─► hung: dumping stacks ─► stopping
//	running ─► hung: dumping stacks      (no RAS reporter is alive)
//	any state ─► stopping                (a failure, a diagnosis done, the user)
//
// supervisor.enter is the one place it changes.
type attemptState int

const (
	// attemptRunning: the workers run; the first failure stops the group.
	attemptRunning attemptState = iota
	// attemptAwaitingRAS: a hang was declared and NCCL's RAS report is on
	// its way, asked for while every rank still runs; then the stacks.
	attemptAwaitingRAS
	// attemptDumping: a hang was declared and the workers' stacks are on
	// their way; the group stops when all are in, or at dumpWait.
	attemptDumping
	// attemptStopping: every node was told to stop (a failure, a hang
	// diagnosed, the user); what ends now is a consequence.
	attemptStopping
)

func (st attemptState) String() string {
	switch st {
	case attemptRunning:
		return "running"
	case attemptAwaitingRAS:
		return "hung: waiting for RAS"
	case attemptDumping:
		return "hung: dumping stacks"
	case attemptStopping:
		return "stopping"
	}
	return fmt.Sprintf("attemptState(%d)", int(st))
}

// diagnosing reports whether a hang diagnosis is under way: the group is
// not yet being stopped.
func (st attemptState) diagnosing() bool { return st == attemptAwaitingRAS || st == attemptDumping }

// canMoveTo reports whether next may follow st: forward only, and
// stopping from every state, stopping included (a kill after a graceful
// stop stops again, at once).
func (st attemptState) canMoveTo(next attemptState) bool {
	switch next {
	case attemptAwaitingRAS:
		return st == attemptRunning
	case attemptDumping:
		return st == attemptRunning || st == attemptAwaitingRAS
	case attemptStopping:
		return true
	}
	return false
}

// supervisor is an attempt's view of its failures.
type supervisor struct {
	ms   []*member
	opts Options
	s    *sink

	state  attemptState
	stopAt time.Time // when the group was first asked to stop
	// interrupted: the user stopped the run (Ctrl-C, SIGTERM).
	interrupted bool
	stopSig     syscall.Signal // the signal of a stop from outside
	exited      int            // workers whose exit came in
	started     int            // workers that reported their start
	finished    int            // workers that exited 0

	// A node that exited non-zero, was lost or did not start, judged by
	// torchrun's exit and failure summary.
	nodeFailure *Failure
	nodeFailed  int
	nodeFirst   bool // it came before any worker failure and explains them

	ahead *aheadState // the next attempt's hand-off ahead, once begun (ahead.go)

	// Worker failures that were not caused by a stop, in arrival order.
	causes []workerCause

	// hang is set when a hang was declared, and stays set through the stop
	// that follows: every worker's end after it is a consequence of the
	// diagnosis.
	hang        *Failure
	dumpPending int         // silent workers whose stacks (or end) are still to come
	silent      []workerRef // the workers silent when the hang was declared
	attempt     int         // from 0, for Options.SaveStacks and Options.Stopping
	ctx         context.Context
	clock       *silenceClock // the attempt's progress, group-wide (nil: start-up is not told apart)
	rasLagging  []int         // the ranks NCCL's RAS found lagging in a hang
}

// workerRef names one worker of the attempt: its node's index, its local
// rank.
type workerRef struct{ node, lr int }

// enter moves the attempt to state next and does what entering it means:
// ask the RAS reporter for NCCL's report, or every worker for its stacks.
// Stopping the nodes is stopAll's, which enters attemptStopping first. A
// move the states do not allow is a bug in launch, and panics.
func (sv *supervisor) enter(next attemptState) {
	if !sv.state.canMoveTo(next) {
		panic(fmt.Sprintf("launch: attempt state %q cannot move to %q", sv.state, next))
	}
	sv.state = next
	switch next {
	case attemptAwaitingRAS:
		// NCCL's report first, while every rank still runs: the stack
		// dumps end the workers, and a dead rank no longer lags.
		sv.tellAll(wire.TellRAS) // a job without NCCL answers at once, with nothing
	case attemptDumping:
		sv.s.message(sv.opts.Diag, "gorun: asking every silent worker for its Python stacks (py-spy dump where installed, else faulthandler)\n")
		sv.tellAll(wire.TellDump)
	}
}

type workerCause struct {
	i     int
	exit  wire.WorkerExit
	phase Phase
}

// stopAll stops every running node and returns how many it asked.
func (sv *supervisor) stopAll(now bool) int {
	sv.clock.freeze()
	if sv.stopAt.IsZero() {
		sv.stopAt = time.Now()
		if !sv.interrupted && sv.attempt < sv.opts.MaxRestarts {
			// A node whose workers were not all past their imports (a
			// crash at start-up) has no standby yet: it starts one now, so
			// that its torchrun's import runs beside the stop and the
			// recheck, not after them.
			for _, m := range sv.ms {
				m.startWarm()
			}
			if sv.opts.Stopping != nil {
				sv.opts.Stopping(sv.ctx, sv.attempt)
			}
		}
	}
	if sv.state.diagnosing() {
		sv.reportHang() // with the stacks that came
	}
	sv.enter(attemptStopping)
	n := 0
	for _, m := range sv.ms {
		if !m.running {
			continue
		}
		// The agent freezes torchrun first, so it neither reacts to its
		// workers' ends nor prints a shutdown of its own: each worker hears
		// of the stop once, from gorun.
		if sv.interrupted && !now {
			m.proc.Interrupt(sv.stopSig, sv.opts.StopGrace)
		} else {
			m.proc.Stop(now)
		}
		n++
	}
	return n
}

// running is how many workers have started and not exited, and on how
// many nodes.
func (sv *supervisor) running() (workers, nodes int) {
	for _, m := range sv.ms {
		if m.running {
			nodes++
		}
	}
	return max(0, sv.started-sv.exited), nodes
}

// stopNotice is the line that says a stop from outside has begun: what
// every worker gets, and how long it has.
func (sv *supervisor) stopNotice() string {
	workers, nodes := sv.running()
	grace := "the job's grace"
	if g := sv.opts.StopGrace; g > 0 {
		grace = ShortDuration(g) + " (--stop-grace)"
	}
	return fmt.Sprintf("gorun: %s: stopping %s on %s: each gets %s once, and what still runs after %s is killed; %s again kills at once\n",
		SignalName(sv.stopSig), plural(workers, "worker"), plural(nodes, "node"), SignalName(sv.stopSig), grace, SignalName(sv.stopSig))
}

// pass passes sig to every running worker and says so.
func (sv *supervisor) pass(sig syscall.Signal) string {
	workers, nodes := sv.running()
	if sv.state == attemptStopping || workers == 0 {
		return fmt.Sprintf("gorun: %s: no worker is running now; not passed on\n", SignalName(sig))
	}
	for _, m := range sv.ms {
		if m.running {
			m.proc.Signal(sig)
		}
	}
	return fmt.Sprintf("gorun: %s passed to %s on %s\n", SignalName(sig), plural(workers, "worker"), plural(nodes, "node"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// workerExited records a worker's end and reports whether it is a failure
// that should stop the group: the first exit gorun did not cause.
func (sv *supervisor) workerExited(ev event) bool {
	m := sv.ms[ev.i]
	ex := ev.exit
	m.mu.Lock()
	w := m.workers[ev.lr]
	joined := w != nil && w.joined
	if w != nil {
		w.done = true
	}
	m.mu.Unlock()
	if !ex.Failed() {
		sv.finished++
		return false
	}
	if ex.Stopped || sv.hang != nil {
		return false
	}
	phase := PhaseStartup
	switch {
	case sv.finished > 0:
		phase = PhaseExit
	case joined:
		phase = PhaseTraining
	}
	sv.causes = append(sv.causes, workerCause{i: ev.i, exit: ex, phase: phase})
	if sv.state == attemptStopping {
		return false
	}
	sv.s.message(sv.opts.Diag, fmt.Sprintf("gorun: %s%s %s during %s; stopping every node\n",
		m.node.Name, rankWords(ex.Rank, ex.LocalRank), exitWords(ex), phase))
	return true
}

// stepRecheck is how often a hang check looks again once the group has
// made no step for Options.StepTimeout but has not printed all along.
const stepRecheck = time.Second

// startupRecheck is how often a hang check looks again while the group
// starts up, so that the limit after start-up applies once it is over.
const startupRecheck = time.Second

// hangLimit is how long the group may be silent now, and whether that is
// because it is still starting up (Options.StartupTimeout).
func (sv *supervisor) hangLimit() (time.Duration, bool) {
	if sv.opts.StartupTimeout > 0 && sv.clock.startingUp() {
		return sv.opts.StartupTimeout, true
	}
	return sv.opts.HangTimeout, false
}

// hangCheck returns how long until the group would count as hung, or 0
// when it is: then it names the silent workers and asks every one of them
// for its stacks.
func (sv *supervisor) hangCheck(attemptStart time.Time) time.Duration {
	limit, startingUp := sv.hangLimit()
	if sv.started == 0 {
		return limit // torchrun's rendezvous has its own timeout
	}
	latest := attemptStart
	type silent struct {
		node      string
		rank, lr  int
		last      time.Time
		nodeIndex int
	}
	var all []silent
	for _, m := range sv.ms {
		m.mu.Lock()
		for lr, w := range m.workers {
			if w.last.After(latest) {
				latest = w.last
			}
			if !w.done {
				all = append(all, silent{m.node.Name, w.started.Rank, lr, w.last, m.index})
			}
		}
		m.mu.Unlock()
	}
	stall := false // no step for StepTimeout, though not silent
	if wait := time.Until(latest.Add(limit)); wait > 0 {
		if startingUp {
			// Start-up may end any moment, and the limit after it be
			// shorter.
			return min(wait, startupRecheck)
		}
		if sv.opts.StepTimeout <= 0 {
			return wait
		}
		stepAt := sv.clock.lastStep()
		if stepAt.IsZero() {
			return min(wait, sv.opts.StepTimeout) // no step yet: look again, as one may come
		}
		if stepWait := time.Until(stepAt.Add(sv.opts.StepTimeout)); stepWait > 0 {
			return min(wait, stepWait)
		}
		if !sv.clock.stalled(time.Now(), sv.opts.StepTimeout, limit) {
			return min(wait, stepRecheck) // past the limit, but not printing all along: look again
		}
		stall, limit, latest = true, sv.opts.StepTimeout, stepAt
	}
	if len(all) == 0 {
		return limit
	}
	sv.clock.freeze() // the dumps and ends that follow are the diagnosis's
	sort.Slice(all, func(a, b int) bool {
		if all[a].nodeIndex != all[b].nodeIndex {
			return all[a].nodeIndex < all[b].nodeIndex
		}
		return all[a].lr < all[b].lr
	})
	var names, nodes []string
	var b strings.Builder
	what := fmt.Sprintf("for %v (--hang-timeout)", limit)
	if startingUp {
		waiting, of := sv.clock.pending()
		what = fmt.Sprintf("for %v in start-up (%d of %d workers had made none yet)", limit, waiting, of)
	}
	if stall {
		fmt.Fprintf(&b, "gorun: hang: no worker made a training step for %v, though they still printed or wrote (--hang-timeout auto, from the steps of earlier runs)\n", limit)
	} else {
		fmt.Fprintf(&b, "gorun: hang: no worker made progress (an output line, a write, or a touch of $%s) %s\n", wire.HeartbeatFileVar, what)
	}
	sv.silent = sv.silent[:0]
	for _, w := range all {
		switch {
		case len(all) > maxSilentLines:
		case stall:
			fmt.Fprintf(&b, "gorun:   stalled: %s%s, last step %.0fs ago\n", w.node, rankWords(w.rank, w.lr), time.Since(latest).Seconds())
		default:
			fmt.Fprintf(&b, "gorun:   silent: %s%s, last progress %.0fs ago\n", w.node, rankWords(w.rank, w.lr), time.Since(w.last).Seconds())
		}
		names = append(names, fmt.Sprintf("%s%s", w.node, rankWords(w.rank, w.lr)))
		if !slices.Contains(nodes, w.node) {
			nodes = append(nodes, w.node)
		}
		sv.silent = append(sv.silent, workerRef{w.nodeIndex, w.lr})
	}
	who := strings.Join(names, ", ")
	if len(all) > maxSilentLines {
		// A thousand ranks are one line: which of them matter is the
		// culprit lines' to say.
		who = fmt.Sprintf("%d ranks on %d nodes (every worker still running)", len(all), len(nodes))
		if stall {
			fmt.Fprintf(&b, "gorun:   stalled: %s, last step %.0fs ago\n", who, time.Since(latest).Seconds())
		} else {
			fmt.Fprintf(&b, "gorun:   silent: %s, last progress %.0fs ago\n", who, time.Since(latest).Seconds())
		}
	}
	sv.s.message(sv.opts.Diag, b.String())
	node := strings.Join(nodes, ", ")
	if len(nodes) > maxSilentLines {
		node = hosts.Compress(nodes)
	}
	sv.hang = &Failure{Node: node, Rank: -1, LocalRank: -1, Code: ExitHang, Phase: PhaseHang,
		Reason: fmt.Sprintf("hang: no progress for %v; silent: %s", limit, who)}
	switch {
	case stall:
		sv.hang.Reason = fmt.Sprintf("hang: no training step for %v; stalled: %s", limit, who)
	case startingUp:
		sv.hang.Reason = fmt.Sprintf("hang in start-up: no progress for %v; silent: %s", limit, who)
	}
	sv.dumpPending = len(all)
	ras := false
	for _, m := range sv.ms {
		m.log.tagWorkers.Store(true) // NCCL's report, and lines of several ranks at once: say whose
		m.mu.Lock()
		for _, w := range m.workers {
			ras = ras || (w.started.RASReporter && !w.done && m.running)
		}
		m.mu.Unlock()
	}
	if ras {
		sv.enter(attemptAwaitingRAS)
	} else {
		sv.enter(attemptDumping)
	}
	return 0
}

// requestDumps asks every worker for its stacks, once NCCL's RAS report is
// in (or was waited for long enough); it does nothing unless the attempt is
// waiting for that report.
func (sv *supervisor) requestDumps() {
	if sv.state == attemptAwaitingRAS {
		sv.enter(attemptDumping)
	}
}

func (sv *supervisor) tellAll(msg ...byte) {
	for _, m := range sv.ms {
		if m.running {
			m.proc.Tell(msg...)
		}
	}
}

// rootCause picks the failure of the attempt: a hang when one was
// declared; else the earliest worker failure that no stop caused (by the
// worker's own clock), unless a node was lost or failed to start first;
// else what torchrun's exit said.
func (sv *supervisor) rootCause() *Failure {
	if sv.hang != nil {
		return sv.hang // the stacks printed are its last lines
	}
	if len(sv.causes) > 0 && !sv.nodeFirst {
		c := sv.causes[0]
		for _, o := range sv.causes[1:] {
			if o.exit.Time < c.exit.Time {
				c = o
			}
		}
		m := sv.ms[c.i]
		return &Failure{Node: m.node.Name, Rank: c.exit.Rank, LocalRank: c.exit.LocalRank,
			Code: c.exit.ShellCode(), Signal: c.exit.Signal, Phase: c.phase,
			Reason:    fmt.Sprintf("worker%s %s during %s", rankWords(c.exit.Rank, c.exit.LocalRank), exitWords(c.exit), c.phase),
			LastLines: m.log.lastLinesOf(c.exit.LocalRank)}
	}
	if sv.nodeFailure == nil {
		return nil
	}
	f := *sv.nodeFailure
	if f.Phase == PhaseUnknown && sv.started == 0 {
		f.Phase = PhaseRendezvous
	}
	f.LastLines = sv.ms[sv.nodeFailed].log.lastLines()
	return &f
}

// exitWords is "exited with 3" or "was killed by signal 9 (SIGKILL)".
func exitWords(ex wire.WorkerExit) string {
	if ex.SupervisorLost {
		return fmt.Sprintf("was killed by signal %d (%s): its supervisor (gorun %s) died, and the worker with it", ex.Signal, signalName(ex.Signal), wire.RankCommand)
	}
	if ex.Signal != 0 {
		return fmt.Sprintf("was killed by signal %d (%s)", ex.Signal, signalName(ex.Signal))
	}
	return fmt.Sprintf("exited with %d", ex.Code)
}

// maxSilentLines is how many silent workers a hang names one by one; past
// it they are counted.
const maxSilentLines = 8

// reportHang groups the silent workers by where their stacks say they are
// and prints the culprit lines, the likely culprit's stack, and where every
// rank's stacks were kept (Options.SaveStacks). A plainly stuck rank, alone
// in its place, becomes the hang's failure.
func (sv *supervisor) reportHang() {
	ranks := make([]RankStacks, 0, len(sv.silent))
	for _, ref := range sv.silent {
		m := sv.ms[ref.node]
		m.mu.Lock()
		w := m.workers[ref.lr]
		r := RankStacks{Node: m.node.Name, NodeIndex: ref.node, Rank: w.started.Rank, LocalRank: ref.lr, Dump: w.stacks}
		m.mu.Unlock()
		ranks = append(ranks, r)
	}
	if len(ranks) == 0 {
		return
	}
	groups := groupHang(ranks)
	console, lines := renderHang(groups, len(ranks), sv.rasLagging)
	if sv.opts.SaveStacks != nil {
		var all []RankStacks
		for _, g := range groups {
			all = append(all, g.ranks...)
		}
		slices.SortStableFunc(all, func(a, b RankStacks) int {
			if a.NodeIndex != b.NodeIndex {
				return a.NodeIndex - b.NodeIndex
			}
			return a.LocalRank - b.LocalRank
		})
		if dir, err := sv.opts.SaveStacks(sv.attempt, all, lines); err != nil {
			console += fmt.Sprintf("gorun: hang: could not keep every rank's stacks: %v\n", err)
		} else if dir != "" {
			console += fmt.Sprintf("gorun: hang: every rank's stacks, all threads: %s (one file per rank, and summary.txt)\n", dir)
		}
	}
	sv.s.message(sv.opts.Diag, console)
	lag := slices.Compact(slices.Sorted(slices.Values(sv.rasLagging)))
	switch g := groups[0]; {
	case g.stuck() && len(g.ranks) == 1 && len(groups) > 1:
		r := g.ranks[0]
		sv.hang.Node, sv.hang.Rank, sv.hang.LocalRank = r.Node, r.Rank, r.LocalRank
		sv.hang.Reason += "; " + g.line(len(ranks))
	case !g.stuck() && len(lag) == 1:
		// Nobody is stuck in Python, and NCCL names the one behind.
		for _, r := range ranks {
			if r.Rank == lag[0] {
				sv.hang.Node, sv.hang.Rank, sv.hang.LocalRank = r.Node, r.Rank, r.LocalRank
			}
		}
		sv.hang.Reason += fmt.Sprintf("; NCCL's RAS: rank %d is behind the others", lag[0])
	}
}
