package launch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/pystack"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/sshexec"
)

// Run starts the job on every node and supervises it as one group, attempt
// after attempt, until every node exits 0 (Result, nil), no restart is left
// (*JobFailed), the context is cancelled (an error wrapping ErrInterrupted)
// or opts.Attempt fails (its error, wrapped).
//
// When any node exits non-zero or is lost, every other node is stopped at
// once (Process.Stop(false)) and waited for; then, while restarts remain,
// Run reports the failure on opts.Diag, waits opts.Backoff and starts the
// whole group again. A node that exits 0 while others run is left alone.
//
// Every process Run starts has been waited for when it returns, and no
// goroutine of Run's is left behind.
func Run(ctx context.Context, opts Options) (Result, error) {
	if opts.Attempt == nil {
		return Result{}, errors.New("launch: Options.Attempt is nil")
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Err == nil {
		opts.Err = opts.Out
	}
	if opts.Diag == nil {
		opts.Diag = io.Discard
	}
	steps := &stepCounter{}
	s := newSink(newStatusLine(opts.StatusOut, opts.Status, steps.total, opts.Color))
	defer closeSink(s, opts.Diag)
	// Once the user stops the run, output that nobody reads may not hold
	// it up (sink.bound).
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
			s.bound()
		case <-finished:
		}
	}()
	if s.status != nil {
		stopTicks := make(chan struct{})
		ticked := make(chan struct{})
		go func() {
			defer close(ticked)
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					s.refresh()
				case <-stopTicks:
					return
				}
			}
		}()
		defer func() { close(stopTicks); <-ticked }() // before s.close: nothing sent after it
	}

	var res Result
	var restart *Restart // the timeline of the restart under way
	notices := newNodeNotices()
	for k := 0; ; k++ {
		if ctx.Err() != nil {
			return res, fmt.Errorf("%w before attempt %d", ErrInterrupted, k+1)
		}
		nodes, err := opts.Attempt(ctx, k, restart)
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w while preparing attempt %d: %w", ErrInterrupted, k+1, err)
			}
			return res, fmt.Errorf("prepare attempt %d: %w", k+1, err)
		}
		if len(nodes) == 0 {
			return res, fmt.Errorf("attempt %d: no nodes to run on", k+1)
		}
		res.Attempts = k + 1
		o := runAttempt(ctx, opts, s, nodes, k, restart, notices, steps)
		steps.attemptEnded()
		res.Silences = append(res.Silences, o.silence)
		res.Steps = append(res.Steps, o.steps)
		if restart != nil {
			res.Restarts = append(res.Restarts, *restart)
		}
		res.Failure = o.failure
		if o.failure != nil && opts.Failed != nil {
			opts.Failed(k, *o.failure)
		}
		if o.interrupted {
			return res, fmt.Errorf("%w: stopped %d of %d nodes", ErrInterrupted, o.stopped, len(nodes))
		}
		if o.failure == nil {
			return res, nil
		}
		if k >= opts.MaxRestarts {
			s.message(opts.Diag, renderSummary(*o.failure, res.Attempts))
			return res, &JobFailed{Failure: *o.failure}
		}
		restart = &Restart{Attempt: k, Failed: o.failSeen, Stopped: o.end.Sub(o.failSeen), Ahead: o.ahead}
		if o.ahead > 0 {
			// Before the failure (negative) when every node was handed its
			// job while the attempt ran; 0 means none, and a hand-off
			// within a millisecond of the failure is said as at it.
			if restart.Handed = o.aheadAt.Sub(o.failSeen); restart.Handed.Abs() < time.Millisecond {
				restart.Handed = time.Millisecond
			}
		}
		pause := backoff(opts, k+1, o.failure.Code == -1)
		msg := fmt.Sprintf("gorun: %s failed (%s); restarting the whole group (attempt %d of %d)", o.failure.Node, o.failure.Reason, k+2, opts.MaxRestarts+1)
		if pause > 0 {
			msg += fmt.Sprintf(" in %s", pause)
		}
		s.message(opts.Diag, msg+"\n")
		if !sleepCtx(ctx, pause) {
			return res, fmt.Errorf("%w during the pause before attempt %d", ErrInterrupted, k+2)
		}
	}
}

// closeSink closes s and says what it dropped, if anything, on diag
// (waiting for that write a moment only: diag may be the reader that
// does not read).
func closeSink(s *sink, diag io.Writer) {
	n := s.close()
	if n == 0 {
		return
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		fmt.Fprintf(diag, "gorun: %d bytes of output were dropped during the stop: nothing was reading gorun's output\n", n)
	}()
	t := time.NewTimer(closeLimit)
	defer t.Stop()
	select {
	case <-wrote:
	case <-t.C:
	}
}

// outcome is how one attempt ended.
type outcome struct {
	failure     *Failure  // the root cause, nil if every node exited 0
	interrupted bool      // ctx was cancelled or Kill closed
	stopped     int       // nodes still running when an interruption stopped them
	failSeen    time.Time // when the group began to be stopped (end, if it never was)
	end         time.Time // when every node had exited and its output was in
	silence     Silence
	steps       AttemptSteps // what the workers' output said of their steps
	ahead       int          // nodes of the next attempt handed their jobs ahead (Options.Ahead)
	aheadAt     time.Time    // when the last of them was
}

// member is one node of a running attempt.
type member struct {
	index          int
	node           Node
	log            *nodeLog
	stdout, stderr *lineWriter // torchrun's own streams (the relayed frames), and the agent's stderr
	agentErr       *lineWriter
	decoder        *wire.FrameDecoder
	proc           sshexec.Process
	startErr       error
	running        bool // started and not yet waited for

	shown   []int        // Options.LocalRanks
	prefix  Prefix       // Options.Prefix
	counter *stepCounter // the run's, for the status line

	attempt   int                                            // from 0
	telemetry func(node string, attempt int, payload []byte) // Options.Telemetry

	// Written by the node's stdout copy (frames) and read by runAttempt.
	mu       sync.Mutex
	workers  map[int]*workerState // by local rank
	imported int                  // workers past their imports (importDone)

	warm      func()        // starts the next attempt's agent on standby; nil: none
	warmOnce  sync.Once     // warm runs once an attempt (startWarm)
	warmed    chan struct{} // closed when warm has returned (its agent is in place, or none will be)
	firstLine sync.Once
	clock     *silenceClock // the attempt's, shared by its members
	imports   *importGate   // the attempt's, shared by its members
}

// importGate holds the next attempt's standbys until the workers of
// every node are past their imports: a standby's import on a node whose
// own workers are done would still slow another node's start-up where
// nodes share CPUs, or a filesystem that every node imports from at once.
type importGate struct {
	mu      sync.Mutex
	waiting int // nodes whose workers are not all past their imports
	members []*member
}

// nodeDone counts one more node whose workers are all past their imports;
// with the last one, every node's standby starts.
func (g *importGate) nodeDone() {
	g.mu.Lock()
	g.waiting--
	open := g.waiting == 0
	g.mu.Unlock()
	if open {
		for _, m := range g.members {
			m.startWarm()
		}
	}
}

// workerState is what the head knows of one worker of an attempt.
type workerState struct {
	started  wire.WorkerStarted
	out, err *lineWriter
	teeHead  []byte        // what torchrun's --tee puts before its copies of the worker's lines
	last     time.Time     // last progress: started, a line, a heartbeat
	progress bool          // made progress once: past its start-up
	joined   bool          // reached the rendezvous store
	imported bool          // past its imports: joined, or ended (importDone)
	done     bool          // exited or dumped its stacks
	stacks   *pystack.Dump // sent for a hang diagnosis (wire.FrameStacks)
	steps    *stepTrack    // what its output said of its training steps
}

type exit struct {
	i    int
	code int
	err  error
}

// event is a worker's start, exit or stack dump, passed from a node's
// frame decoder to the attempt's loop.
type event struct {
	i       int
	kind    byte
	started wire.WorkerStarted
	exit    wire.WorkerExit
	lr      int
	start   wire.StartInfo // FrameStart
	lagging []int          // FrameRASDone: the ranks NCCL's RAS found lagging
}

// evFirstLine is the event of a node's first worker line in an attempt.
const evFirstLine byte = 0

// settleWindow is how long a failure that looks like a consequence (a
// worker's exit 1) waits for another node to report a worker with a code of
// its own before the group is stopped; torchrun notices a worker's exit
// within its 0.1 s monitor interval. It applies only where no worker
// reports for itself (torchrun's own failure summary is all there is).
const settleWindow = 500 * time.Millisecond

// dumpWait bounds how long a hang diagnosis waits for the workers' stacks;
// before them it waits up to wire.RASWait for NCCL's RAS report.
const dumpWait = 5 * time.Second

// handleFrame is a node's frame decoder's handler: output goes straight
// to the lines, events to the attempt's loop.
func (m *member) handleFrame(kind byte, p []byte, events chan<- event) {
	switch kind {
	case wire.FrameStdout:
		m.stdout.Write(p)
	case wire.FrameStderr:
		m.stderr.Write(p)
	case wire.FrameTelemetry:
		if m.telemetry != nil {
			m.telemetry(m.node.Name, m.attempt, p)
		}
	case wire.FrameStart:
		var si wire.StartInfo
		if json.Unmarshal(p, &si) == nil {
			events <- event{i: m.index, kind: kind, start: si}
		}
	case wire.FrameStacks:
		lr, rest, err := wire.SplitRank(p)
		var d pystack.Dump
		if err != nil || json.Unmarshal(rest, &d) != nil {
			return
		}
		m.mu.Lock()
		if w := m.workers[lr]; w != nil {
			w.stacks = &d
		}
		m.mu.Unlock()
	case wire.FrameOut, wire.FrameErr, wire.FrameProgress, wire.FrameCheckpoint, wire.FrameStep, wire.FrameInit, wire.FrameDumped, wire.FrameRASDone:
		lr, rest, err := wire.SplitRank(p)
		if err != nil {
			return
		}
		m.mu.Lock()
		w := m.workers[lr]
		if w == nil {
			m.mu.Unlock()
			return // nothing before the start frame
		}
		w.last = time.Now()
		out := w.out
		if kind == wire.FrameErr {
			out = w.err
		}
		warm, first := false, false
		if kind == wire.FrameInit {
			w.joined = true
			warm = m.importDone(w)
		}
		progress := kind != wire.FrameDumped && kind != wire.FrameRASDone // those answer a hang's diagnosis
		if progress {
			first, w.progress = !w.progress, true
		}
		last, steps := w.last, w.steps
		m.mu.Unlock()
		if progress {
			m.clock.tick(last, false, first)
		}
		if warm {
			m.imports.nodeDone()
		}
		switch kind {
		case wire.FrameOut, wire.FrameErr:
			m.firstLine.Do(func() { events <- event{i: m.index, kind: evFirstLine} })
			m.clock.printed(last)
			out.Write(rest)
		case wire.FrameCheckpoint:
			ago, _ := strconv.ParseInt(string(rest), 10, 64)
			steps.checkpointAt(last.Add(-frameAge(ago)))
		case wire.FrameStep:
			n, ago, ok := strings.Cut(string(rest), " ")
			step, err1 := strconv.ParseInt(n, 10, 64)
			age, err2 := strconv.ParseInt(ago, 10, 64)
			if ok && err1 == nil && err2 == nil {
				steps.step(step, last.Add(-frameAge(age)))
			}
		case wire.FrameDumped:
			events <- event{i: m.index, kind: kind, lr: lr}
		case wire.FrameRASDone:
			var lagging []int
			if len(rest) > 0 {
				_ = json.Unmarshal(rest, &lagging) // none said: none lag
			}
			events <- event{i: m.index, kind: kind, lr: lr, lagging: lagging}
		}
	case wire.FrameStarted:
		var st wire.WorkerStarted
		if json.Unmarshal(p, &st) != nil || st.LocalRank < 0 {
			return
		}
		w := &workerState{started: st, last: time.Now(), teeHead: m.prefix.torchrunTee(st), steps: newStepTrack(m.counter, m.clock.stepped),
			out: newRankWriter(m.log, m.stdout, st, m.prefix, 1), err: newRankWriter(m.log, m.stderr, st, m.prefix, 2)}
		if m.shown != nil && !slices.Contains(m.shown, st.LocalRank) {
			w.out.out, w.err.out = io.Discard, io.Discard
		}
		m.mu.Lock()
		m.workers[st.LocalRank] = w
		m.mu.Unlock()
		m.clock.tick(w.last, true, false)
		events <- event{i: m.index, kind: kind, started: st, lr: st.LocalRank}
	case wire.FrameLost, wire.FrameExit:
		var ex wire.WorkerExit
		if kind == wire.FrameLost {
			// A supervisor killed before its report: its worker died
			// with it, by its parent-death signal.
			var st wire.WorkerStarted
			if len(p) == 0 || p[0] != wire.FrameStarted || json.Unmarshal(p[1:], &st) != nil {
				return
			}
			ex = wire.WorkerExit{Rank: st.Rank, LocalRank: st.LocalRank, Code: -1, Signal: int(syscall.SIGKILL),
				SupervisorLost: true, Time: time.Now().UnixNano()}
			kind = wire.FrameExit
		} else if json.Unmarshal(p, &ex) != nil {
			return
		}
		m.mu.Lock()
		warm, first, known := false, false, false
		if w := m.workers[ex.LocalRank]; w != nil {
			// Its last lines were sent before the exit: complete a
			// partial one now, so the summary has it.
			w.out.close()
			w.err.close()
			warm = m.importDone(w) // its imports are over, one way or the other
			first, w.progress, known = !w.progress, true, true
		}
		m.mu.Unlock()
		switch now := time.Now(); {
		case known && !ex.Failed():
			m.clock.tick(now, false, first) // a clean end is progress
		case first:
			m.clock.settled(now) // past its start-up, but a failure ends no silence
		}
		if warm {
			m.imports.nodeDone()
		}
		events <- event{i: m.index, kind: kind, exit: ex, lr: ex.LocalRank}
	}
}

// importDone counts one more worker past its imports (joined the
// rendezvous store, or ended) and reports whether it is the node's last
// (importGate). m.mu is held.
func (m *member) importDone(w *workerState) bool {
	if w.imported {
		return false
	}
	w.imported = true
	m.imported++
	return m.imported == m.node.Workers
}

// startWarm starts the next attempt's agent on standby in the background,
// once: when the workers of every node are past their imports
// (importGate), or when the attempt is stopped for a restart before they
// were (stopAll); as soon as the node's attempt has started where it has
// CPUs to spare (Node.WarmEarly).
func (m *member) startWarm() {
	if m.warm != nil {
		m.warmOnce.Do(func() {
			go func() {
				defer close(m.warmed)
				m.warm()
			}()
		})
	}
}

// teeCopy reports whether line, of torchrun's console, is its --tee copy
// of a line of a worker that speaks for itself: such a copy is dropped.
func (m *member) teeCopy(line []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, _ := splitWorkerPrefix(line); r >= 0 && m.workers[r] != nil {
		return true // "[default0]:", which a torchrun older than the template (2.2) puts there too
	}
	if m.prefix.Template != "" {
		for _, w := range m.workers {
			if bytes.HasPrefix(line, w.teeHead) {
				return true
			}
		}
	}
	return false
}

// runAttempt starts every node, waits for all of them and says how it went.
// It returns only when every started process has been waited for and its
// output flushed.
func runAttempt(ctx context.Context, opts Options, s *sink, nodes []Node, k int, rs *Restart, notices *nodeNotices, counter *stepCounter) outcome {
	events := make(chan event, 256)
	ms := make([]*member, len(nodes))
	expected := 0 // workers of the attempt, where every node says
	for _, n := range nodes {
		if n.Workers <= 0 {
			expected = 0
			break
		}
		expected += n.Workers
	}
	clock := newSilenceClock(time.Now(), expected)
	clock.watchOutput = opts.StepTimeout > 0 // a stall needs the output since the last step (hangCheck)
	imports := &importGate{}
	for i, n := range nodes {
		l := newNodeLog(n.Name, i, opts.Color, opts.Plain)
		l.stamp = opts.Prefix.Stamp
		m := &member{index: i, node: n, log: l, workers: map[int]*workerState{}, shown: opts.LocalRanks, prefix: opts.Prefix, counter: counter,
			attempt: k, clock: clock, imports: imports}
		if n.Workers > 0 {
			imports.waiting++ // a node of unknown size holds no other's standby
		}
		imports.members = append(imports.members, m)
		if opts.Telemetry != nil {
			m.telemetry = func(node string, k int, p []byte) {
				if msg := opts.Telemetry(node, k, p); msg != "" {
					s.message(opts.Diag, msg)
				}
			}
		}
		m.stdout, m.stderr = newLineWriter(l, s, opts.Out), newLineWriter(l, s, opts.Err)
		m.stdout.teeCopy, m.stderr.teeCopy = m.teeCopy, m.teeCopy
		m.agentErr = newLineWriter(l, s, opts.Err)
		m.decoder = wire.NewFrameDecoder(func(kind byte, p []byte) { m.handleFrame(kind, p, events) })
		m.node.Job = attemptJob(opts, n.Job)
		if w, ok := n.Runner.(sshexec.Warmer); ok && k < opts.MaxRestarts && n.Workers > 0 && len(n.Job.Preimport) > 0 {
			job := m.node.Job
			if job.Pool != nil {
				// The next attempt's pool imports while this attempt's
				// workers run.
				p := *job.Pool
				p.Beside = n.Workers
				job.Pool = &p
			}
			warmers := []sshexec.Warmer{w}
			for _, r := range n.Standby {
				if w, ok := r.(sshexec.Warmer); ok {
					warmers = append(warmers, w)
				}
			}
			m.warmed = make(chan struct{})
			m.warm = func() {
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), warmStartTimeout)
				defer cancel()
				var wg sync.WaitGroup
				for _, w := range warmers {
					// Without one, the next attempt starts cold there, as ever.
					wg.Go(func() { _ = w.Warm(wctx, job) })
				}
				wg.Wait()
			}
		}
		ms[i] = m
	}
	closeStreams := func(m *member) {
		m.mu.Lock()
		for _, w := range m.workers {
			w.out.close()
			w.err.close()
		}
		m.mu.Unlock()
		m.stdout.close()
		m.stderr.close()
		m.agentErr.close()
	}
	defer func() {
		for _, m := range ms {
			closeStreams(m)
		}
	}()

	// A runner may tie a process's life to the context it was started with,
	// so the start context outlives the user's cancellation once the start
	// is over: stopping is done through Stop, with its grace period.
	startCtx, cancelStart := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStart()
	unhook := context.AfterFunc(ctx, cancelStart)
	if rs != nil {
		rs.Nodes = len(ms)
		if rs.Ahead > 0 {
			rs.Released = time.Since(rs.Failed) // Handed is when the jobs went ahead
		} else {
			rs.Handed = time.Since(rs.Failed)
		}
	}
	began := time.Now()
	startAll(startCtx, ms, opts.Fanout)
	unhook()
	attemptStart := time.Now()
	timelineSaid := false
	sayTimeline := func(force bool) {
		if rs == nil || timelineSaid || (!force && (rs.WorkersUp == 0 || rs.FirstLine == 0)) {
			return
		}
		timelineSaid = true
		s.message(opts.Diag, rs.String()+"\n")
	}

	var o outcome
	sv := supervisor{ms: ms, opts: opts, s: s, attempt: k, ctx: ctx, clock: clock}
	for i, m := range ms {
		if m.startErr != nil && sv.nodeFailure == nil {
			sv.nodeFailure = &Failure{Node: m.node.Name, Rank: -1, LocalRank: -1, Code: -1,
				Phase: PhaseStart, Reason: "start: " + m.startErr.Error()}
			sv.nodeFailed, sv.nodeFirst = i, true
		}
	}
	sv.handAhead() // each node's once its standby is in place

	exits := make(chan exit, len(ms))
	waiting := 0
	for i, m := range ms {
		if m.proc == nil {
			continue
		}
		m.running = true
		waiting++
		go func() {
			code, err := m.proc.Wait()
			exits <- exit{i: i, code: code, err: err}
		}()
	}

	done, kill := ctx.Done(), opts.Kill
	var settle <-chan time.Time
	var hang, dumpDone, rasDone <-chan time.Time
	var hangTimer, dumpTimer, rasTimer *time.Timer
	defer func() {
		for _, t := range []*time.Timer{hangTimer, dumpTimer, rasTimer} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	if opts.HangTimeout > 0 {
		first := opts.HangTimeout
		if opts.StepTimeout > 0 {
			first = min(first, opts.StepTimeout) // a look then, and as often as the stall may end
		}
		hangTimer = time.NewTimer(first)
		hang = hangTimer.C
	}
	if sv.nodeFailure != nil {
		sv.interrupted = ctx.Err() != nil
		sv.stopSig = stopSignal(ctx)
		n := sv.stopAll(false)
		if ctx.Err() != nil {
			// The start failed because the user cancelled it.
			o.interrupted, o.stopped, done = true, n, nil
		}
	}
	say := func(line string) {
		if line != "" {
			s.message(opts.Diag, line)
		}
	}
	for waiting > 0 {
		select {
		case ev := <-events:
			switch ev.kind {
			case wire.FrameStarted:
				sv.started++
				if rs != nil && ms[ev.i].node.Job.Pool != nil {
					rs.Workers++
					if ev.started.Pooled {
						rs.Pooled++
					}
				}
				if why := ev.started.Cold; why != "" {
					// once per node: each rank would say it again
					say(notices.noteOnce(ms[ev.i].node.Name, "pool", "workers start without the worker pool: "+why))
				}
				if expected > 0 && sv.started == expected {
					say(notices.flush()) // every node has said how it started
				}
				if rs != nil && rs.WorkersUp == 0 && (expected == 0 || sv.started == expected) {
					rs.WorkersUp = time.Since(rs.Failed)
					sayTimeline(false)
				}
			case evFirstLine:
				if rs != nil && rs.FirstLine == 0 {
					rs.FirstLine = time.Since(rs.Failed)
					sayTimeline(false)
				}
			case wire.FrameStart:
				if ev.start.Warm && rs != nil {
					rs.Warm++
				}
				if ev.start.Released && rs != nil {
					rs.AheadUsed++
				}
				if why := ev.start.Cold; why != "" && k > 0 { // the first attempt's torchrun started ahead only if it could (WarmFirst)
					say(notices.note(ms[ev.i].node.Name, "torchrun starts cold: "+why))
				}
			case wire.FrameExit:
				sv.exited++
				if sv.workerExited(ev) {
					sv.stopAll(false)
				}
				if sv.hang != nil {
					sv.dumpPending--
				}
			case wire.FrameDumped:
				if sv.hang != nil {
					sv.dumpPending--
				}
			case wire.FrameRASDone:
				sv.rasLagging = append(sv.rasLagging, ev.lagging...)
				sv.requestDumps()
			}
			if sv.state.diagnosing() && sv.dumpPending <= 0 {
				sv.stopAll(false)
			}
		case e := <-exits:
			waiting--
			m := ms[e.i]
			m.running = false
			// Wait returns after the output is copied: complete a partial
			// last line now, so it is in the tail and the parser has it.
			closeStreams(m)
			if err := m.decoder.Err(); err != nil {
				s.message(opts.Diag, fmt.Sprintf("gorun: %s: the agent's output stream was corrupt, output after that was lost: %v\n", m.node.Name, err))
			}
			if e.err == nil && e.code == 0 {
				continue
			}
			if sv.state != attemptRunning {
				continue // consequences of the stop, or of the stack dumps
			}
			f := exitFailure(m, e)
			switch {
			case sv.nodeFailure == nil && f.Code == 1:
				// A generic Python error: often a peer that lost its
				// connection to the worker that really crashed, whose own
				// node may report a moment later. Wait briefly for it.
				sv.nodeFailure, sv.nodeFailed = &f, e.i
				settle = time.After(settleWindow)
				continue
			case sv.nodeFailure == nil, sv.nodeFailure.Code == 1 && f.Code > 1:
				sv.nodeFailure, sv.nodeFailed = &f, e.i
			case f.Code == 1 && settle != nil:
				continue // another consequence; keep waiting for the cause
			}
			if len(sv.causes) == 0 && e.err != nil {
				sv.nodeFirst = true // a lost node explains what follows
			}
			settle = nil
			sv.stopAll(false)
		case <-settle:
			settle = nil
			sv.stopAll(false)
		case <-hang:
			if sv.state != attemptRunning {
				continue
			}
			if wait := sv.hangCheck(attemptStart); wait > 0 {
				hangTimer.Reset(wait)
				continue
			}
			dumpTimer = time.NewTimer(dumpWait)
			dumpDone = dumpTimer.C
			if sv.state == attemptAwaitingRAS {
				dumpTimer.Reset(wire.RASWait + dumpWait)
				rasTimer = time.NewTimer(wire.RASWait)
				rasDone = rasTimer.C
			} else if sv.dumpPending <= 0 {
				sv.stopAll(false)
			}
		case <-rasDone:
			sv.requestDumps()
		case <-dumpDone:
			if sv.state != attemptStopping {
				sv.stopAll(false)
			}
		case <-done:
			done = nil
			o.interrupted, sv.interrupted = true, true
			o.stopped = waiting
			sv.stopSig = stopSignal(ctx)
			s.bound() // before anything more is written
			if sv.state != attemptStopping {
				s.message(opts.Diag, sv.stopNotice())
				sv.stopAll(false)
			}
		case sig := <-opts.Signals:
			s.message(opts.Diag, sv.pass(sig))
		case t := <-opts.Resize:
			sv.tellAll(wire.ResizeTells(t)...)
		case <-kill:
			kill = nil
			if !o.interrupted {
				o.interrupted, o.stopped = true, waiting
			}
			sv.stopAll(true)
		}
	}
	say(notices.flush())
	o.failure = sv.rootCause()
	o.end = time.Now()
	o.ahead, o.aheadAt = sv.aheadWait()
	o.silence = clock.result(k, o.end, o.failure == nil && !o.interrupted, o.failure != nil && o.failure.Code == ExitHang)
	o.failSeen = sv.stopAt
	if o.failSeen.IsZero() {
		o.failSeen = o.end
	}
	sayTimeline(true)
	o.steps = AttemptSteps{Attempt: k, Start: began, End: o.end, Hang: o.failure != nil && o.failure.Code == ExitHang}
	if o.failure != nil {
		o.steps.Failed = o.failSeen
	}
	for _, m := range ms {
		m.mu.Lock()
		for _, lr := range slices.Sorted(maps.Keys(m.workers)) {
			w := m.workers[lr]
			o.steps.Ranks = append(o.steps.Ranks, w.steps.result(m.node.Name, rankIDs{local: lr, global: w.started.Rank}))
		}
		m.mu.Unlock()
	}
	return o
}

// attemptJob is a node's job as an attempt starts it: relayed, its
// workers' exits its supervisors' last word, and a pool's wait bounded.
// The jobs handed ahead (Options.Ahead) are made the same way, so that
// the start finds them equal.
func attemptJob(opts Options, job wire.Job) wire.Job {
	job.Relay = true
	job.RelayEnd = wire.FrameExit
	if pl := job.Pool; pl != nil && pl.Wait == 0 {
		if limit := cmp.Or(opts.StartupTimeout, opts.HangTimeout); limit > 0 {
			// A worker waiting for a pool that is still importing is
			// no process a hang check can name: it starts cold at half
			// the limit, and is named at the latest one limit later.
			p := *pl
			p.Wait = limit / 2
			job.Pool = &p
		}
	}
	return job
}

// frameAgeMax bounds how long before its frame a checkpoint or step is
// taken to be: the supervisor looks for a touch once a second, and tells
// a pending step within stepscan.Every.
const frameAgeMax = 5 * time.Second

// frameAge is a frame's age of what it tells, in ns, within frameAgeMax.
func frameAge(ns int64) time.Duration {
	return time.Duration(min(max(ns, 0), int64(frameAgeMax)))
}

// warmStartTimeout bounds starting the next attempt's agent on standby.
const warmStartTimeout = 30 * time.Second

// startAll starts every node, at most fanout at once (0: all), and waits
// for all the starts. When one fails, the others that started are left
// for the caller to stop.
func startAll(ctx context.Context, ms []*member, fanout int) {
	if fanout <= 0 {
		fanout = len(ms)
	}
	slots := make(chan struct{}, max(fanout, 1))
	errs := make(chan struct{}, len(ms))
	for _, m := range ms {
		go func() {
			slots <- struct{}{}
			defer func() { <-slots; errs <- struct{}{} }()
			r := m.node.Runner
			if r == nil {
				m.startErr = errors.New("no runner")
				return
			}
			p, err := r.Start(ctx, m.node.Job, m.decoder, m.agentErr)
			if err != nil {
				m.startErr = err
				return
			}
			m.proc = p
			if m.node.WarmEarly {
				m.startWarm()
			}
		}()
	}
	for range ms {
		<-errs
	}
}

// exitFailure describes a node that exited non-zero or was lost.
func exitFailure(m *member, e exit) Failure {
	f := Failure{Node: m.node.Name, Rank: -1, LocalRank: -1, Code: e.code}
	if e.err != nil {
		f.Code = -1
		f.Reason = "node lost: " + e.err.Error()
		return f
	}
	f.Reason = fmt.Sprintf("exit %d", e.code)
	rc, ok := m.log.rootCause()
	if !ok {
		return f
	}
	f.Rank, f.LocalRank = rc.Rank, rc.LocalRank
	worker := fmt.Sprintf("worker rank %d", rc.Rank)
	if rc.LocalRank >= 0 {
		worker += fmt.Sprintf(" (local rank %d)", rc.LocalRank)
	}
	switch {
	case rc.ExitCode < 0:
		// torchrun reports a worker killed by a signal as minus the signal.
		f.Code = 128 - rc.ExitCode
		f.Reason = fmt.Sprintf("exit %d: %s was killed by signal %d (%s)", e.code, worker, -rc.ExitCode, signalName(-rc.ExitCode))
	case rc.ExitCode > 0:
		f.Code = rc.ExitCode
		f.Reason = fmt.Sprintf("exit %d: %s exited with %d", e.code, worker, rc.ExitCode)
	default:
		f.Reason = fmt.Sprintf("exit %d: %s failed", e.code, worker)
	}
	return f
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
