package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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
	s := newSink()
	defer s.close()

	var res Result
	for k := 0; ; k++ {
		if ctx.Err() != nil {
			return res, fmt.Errorf("%w before attempt %d", ErrInterrupted, k+1)
		}
		nodes, err := opts.Attempt(ctx, k)
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
		o := runAttempt(ctx, opts, s, nodes)
		res.Failure = o.failure
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
		s.message(opts.Diag, fmt.Sprintf("gorun: %s failed (%s); restarting the whole group (attempt %d of %d)\n",
			o.failure.Node, o.failure.Reason, k+2, opts.MaxRestarts+1))
		if !sleepCtx(ctx, opts.Backoff) {
			return res, fmt.Errorf("%w during the pause before attempt %d", ErrInterrupted, k+2)
		}
	}
}

// outcome is how one attempt ended.
type outcome struct {
	failure     *Failure // first failure observed, nil if every node exited 0
	interrupted bool     // ctx was cancelled or Kill closed
	stopped     int      // nodes still running when an interruption stopped them
}

// member is one node of a running attempt.
type member struct {
	node           Node
	log            *nodeLog
	stdout, stderr *lineWriter
	proc           sshexec.Process
	startErr       error
	running        bool // started and not yet waited for
}

type exit struct {
	i    int
	code int
	err  error
}

// settleWindow is how long a failure that looks like a consequence (a
// worker's exit 1) waits for another node to report a worker with a code of
// its own before the group is stopped; torchrun notices a worker's exit
// within its 0.1 s monitor interval.
const settleWindow = 500 * time.Millisecond

// runAttempt starts every node, waits for all of them and says how it went.
// It returns only when every started process has been waited for and its
// output flushed.
func runAttempt(ctx context.Context, opts Options, s *sink, nodes []Node) outcome {
	ms := make([]*member, len(nodes))
	for i, n := range nodes {
		l := newNodeLog(n.Name, i, opts.Color, opts.Plain)
		ms[i] = &member{node: n, log: l,
			stdout: newLineWriter(l, s, opts.Out), stderr: newLineWriter(l, s, opts.Err)}
	}
	defer func() {
		for _, m := range ms {
			m.stdout.close()
			m.stderr.close()
		}
	}()

	// A runner may tie a process's life to the context it was started with,
	// so the start context outlives the user's cancellation once the start
	// is over: stopping is done through Stop, with its grace period.
	startCtx, cancelStart := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStart()
	unhook := context.AfterFunc(ctx, cancelStart)
	startAll(startCtx, ms)
	unhook()

	var o outcome
	failed := -1
	for i, m := range ms {
		if m.startErr != nil && o.failure == nil {
			o.failure = &Failure{Node: m.node.Name, Rank: -1, LocalRank: -1, Code: -1,
				Reason: "start: " + m.startErr.Error()}
			failed = i
		}
	}

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

	stopAll := func(now bool) int {
		n := 0
		for _, m := range ms {
			if m.running {
				m.proc.Stop(now)
				n++
			}
		}
		return n
	}
	done, kill := ctx.Done(), opts.Kill
	stopping := false
	var settle <-chan time.Time
	if o.failure != nil {
		n := stopAll(false)
		stopping = true
		if ctx.Err() != nil {
			// The start failed because the user cancelled it.
			o.interrupted, o.stopped, done = true, n, nil
		}
	}
	for waiting > 0 {
		select {
		case e := <-exits:
			waiting--
			m := ms[e.i]
			m.running = false
			// Wait returns after the output is copied: complete a partial
			// last line now, so it is in the tail and the parser has it.
			m.stdout.close()
			m.stderr.close()
			if e.err == nil && e.code == 0 {
				continue
			}
			if stopping {
				continue
			}
			f := exitFailure(m, e)
			switch {
			case o.failure == nil && f.Code == 1:
				// A generic Python error: often a peer that lost its
				// connection to the worker that really crashed, whose own
				// node may report a moment later. Wait briefly for it.
				o.failure, failed = &f, e.i
				settle = time.After(settleWindow)
				continue
			case o.failure == nil, o.failure.Code == 1 && f.Code > 1:
				o.failure, failed = &f, e.i
			case f.Code == 1 && settle != nil:
				continue // another consequence; keep waiting for the cause
			}
			settle = nil
			stopAll(false)
			stopping = true
		case <-settle:
			settle = nil
			stopAll(false)
			stopping = true
		case <-done:
			done = nil
			o.interrupted = true
			o.stopped = waiting
			if !stopping {
				stopAll(false)
				stopping = true
			}
		case <-kill:
			kill = nil
			if !o.interrupted {
				o.interrupted, o.stopped = true, waiting
			}
			stopAll(true)
			stopping = true
		}
	}
	if o.failure != nil {
		// Lines that arrived while the others were stopped belong in the
		// summary too.
		o.failure.LastLines = ms[failed].log.lastLines()
	}
	return o
}

// startAll starts every node concurrently and waits for all the starts.
// When one fails, the others that started are left for the caller to stop.
func startAll(ctx context.Context, ms []*member) {
	errs := make(chan struct{}, len(ms))
	for _, m := range ms {
		go func() {
			defer func() { errs <- struct{}{} }()
			r := m.node.Runner
			if r == nil {
				m.startErr = errors.New("no runner")
				return
			}
			p, err := r.Start(ctx, m.node.Job, m.stdout, m.stderr)
			if err != nil {
				m.startErr = err
				return
			}
			m.proc = p
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
