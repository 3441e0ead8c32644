package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/launch"
)

// Attempt is one attempt of the group in the making, as the hooks see it.
type Attempt struct {
	K    int          // from 0
	Spec envplan.Spec // the hosts it runs on
	Plan envplan.Plan
	// Nodes are the attempt's jobs, built from Plan after every
	// BeforeAttempt hook has run; nil until then.
	Nodes []launch.Node
	// Restart is the timeline of the restart this attempt is (nil for the
	// first attempt): the hooks record in it the milestones they reach.
	Restart *launch.Restart
	// Replaced are the nodes whose place a spare took for this attempt
	// (the recheck's); nil: none.
	Replaced []replacement
}

// A Hook takes part in a run's lifecycle. Name says which in errors; what
// it does is in the optional interfaces below, which Run looks for in the
// order the hooks are listed (run.hooks).
type Hook interface{ Name() string }

// BeforeAttempt hooks run in order before every attempt. For a restart
// (a.K > 0) they may change a.Spec and a.Plan: drop a node, move the
// master port. An error ends the run with no further attempt.
type BeforeAttempt interface {
	BeforeAttempt(ctx context.Context, a *Attempt) error
}

// Shaper hooks add to an attempt's jobs (a.Nodes) from a.Plan alone,
// with no other effect: they shape the attempt's jobs, and the next
// attempt's as they are handed ahead (launch.Options.Ahead), which must
// come out the same.
type Shaper interface{ Shape(a *Attempt) }

// Starting hooks see an attempt's jobs (a.Nodes) just before they start.
type Starting interface{ Starting(a *Attempt) }

// Stopping hooks hear that attempt a.K begins to be stopped for a
// failure, with a restart left (launch.Options.Stopping): work the next
// BeforeAttempt needs may start now, beside the stop. a is the failing
// attempt as it ran. They must not block; ctx is the run's.
type Stopping interface {
	Stopping(ctx context.Context, a *Attempt)
}

// AttemptFailed hooks hear of each failed attempt once it is stopped,
// before any restart.
type AttemptFailed interface {
	AttemptFailed(k int, f launch.Failure)
}

// Configurer hooks fill in the supervisor's options they serve (telemetry
// frames, the status line).
type Configurer interface{ Configure(o *launch.Options) }

// Finisher hooks run once after the last attempt, whatever its end, with
// that attempt. An error is something the run was asked for and could not
// do (an output file not written); it makes the exit non-zero.
type Finisher interface {
	Finish(ctx context.Context, a *Attempt, res launch.Result, runErr error) error
}

// hooks lists this run's hooks in the order they act: before a restart
// the last attempt's flight-recorder dumps are fetched first (the recheck
// may drop their node), then every node of the last attempt is made to
// let go of its GPUs (what is left of the job there killed, its memory
// waited for), then the nodes are checked again (and the plan rebuilt
// without a failing node), then the master port is moved if it is still
// held; telemetry attaches its settings to the jobs last. The hang limits
// come first: they only configure, and learn at the end.
func (r *run) hooks(outs outputs, preflightText string, plan envplan.Plan) ([]Hook, error) {
	hs := []Hook{newHangLimits(r.cl, plan, r.ui.Err)}
	if dir := r.cl.Gorun.FlightRecorder; dir != "" {
		hs = append(hs, &flightRecorder{dir: dir, runID: r.cfg.RunID, runners: r.conns, diag: r.ui.Err})
	}
	hs = append(hs, newHangStacks(r.cl.Gorun.FlightRecorder, r.cfg.RunID))
	if r.cfg.RunID != "" {
		g := newGPUFree(r.cfg.RunID, r.conns, r.facts, r.ui.Err)
		g.fanout = r.cl.Gorun.Fanout
		hs = append(hs, g)
	}
	if len(r.spec.Hosts) > 0 {
		hs = append(hs, newRecheck(r))
	}
	if !r.perPod { // the other pods were told the port; moving it would lose them
		hs = append(hs, &masterPort{diag: r.ui.Err})
	}
	watch, err := newGPUWatch(r.cl, r.cfg.Args, preflightText, schema.NewStamp(schema.Telemetry, r.cfg.Getenv), outs, r.ui)
	if err != nil {
		return nil, err
	}
	if watch != nil {
		hs = append(hs, watch)
	}
	var gp *goodputResult
	if !r.cl.Gorun.StepsOff() {
		gp = &goodputResult{}
		cache, _ := os.UserCacheDir()
		hs = append(hs, &goodputLine{start: r.start, w: r.ui.Err, out: gp, runID: r.cfg.RunID, cacheDir: cache, gpu: watch,
			chain: chainKey(r.cfg.Getenv, r.cl.Torchrun.RdzvID, r.cl.Set("rdzv_id"))})
	}
	if path := r.cl.Gorun.Summary; path != "" {
		sum := &summary{stamp: schema.NewStamp(schema.Summary, r.cfg.Getenv), path: path, command: r.cfg.Args, runID: r.cfg.RunID, start: time.Now(), goodput: gp}
		hs = append(hs, sum)
	}
	return hs, nil
}

// beforeAttempt runs every BeforeAttempt hook in order, stopping at the
// first error.
func beforeAttempt(ctx context.Context, hooks []Hook, a *Attempt) error {
	for _, h := range hooks {
		if b, ok := h.(BeforeAttempt); ok {
			if err := b.BeforeAttempt(ctx, a); err != nil {
				return fmt.Errorf("%s: %w", h.Name(), err)
			}
		}
	}
	return nil
}

// sinceFailure is the offset of now in the restart's timeline, for a
// hook to record a milestone it reached; 0 before the first attempt.
func (a *Attempt) sinceFailure() time.Duration {
	if a.Restart == nil {
		return 0
	}
	return time.Since(a.Restart.Failed)
}

func stopping(ctx context.Context, hooks []Hook, a *Attempt) {
	for _, h := range hooks {
		if s, ok := h.(Stopping); ok {
			s.Stopping(ctx, a)
		}
	}
}

func shape(hooks []Hook, a *Attempt) {
	for _, h := range hooks {
		if s, ok := h.(Shaper); ok {
			s.Shape(a)
		}
	}
}

func starting(hooks []Hook, a *Attempt) {
	for _, h := range hooks {
		if s, ok := h.(Starting); ok {
			s.Starting(a)
		}
	}
}

func attemptFailed(hooks []Hook, k int, f launch.Failure) {
	for _, h := range hooks {
		if af, ok := h.(AttemptFailed); ok {
			af.AttemptFailed(k, f)
		}
	}
}

func configure(hooks []Hook, o *launch.Options) {
	for _, h := range hooks {
		if c, ok := h.(Configurer); ok {
			c.Configure(o)
		}
	}
}

// finish runs every Finisher, each whatever the others did, and joins
// their errors.
func finish(ctx context.Context, hooks []Hook, a *Attempt, res launch.Result, runErr error) error {
	var errs []error
	for _, h := range hooks {
		if f, ok := h.(Finisher); ok {
			if err := f.Finish(ctx, a, res, runErr); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", h.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}
