package sshexec

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// Warmer is a Runner that can start the next job's interpreter ahead of
// time. Warm starts an agent for a job like job (wire.Job.Preimport names what
// its interpreter imports first); the next Start on the runner hands its
// job to that agent, which releases the waiting interpreter when the job
// can use it (the same program, working directory and import-time
// environment) and starts the job afresh otherwise. A runner holds at most
// one warm agent; Warm replaces it, and Cool and Close stop it.
type Warmer interface {
	Warm(ctx context.Context, job wire.Job) error
	// Cool stops the agent on standby, if any: its node does not run the
	// next attempt, and what the agent imported may no longer hold when
	// the node runs one again (a node replaced for a broken torch that
	// is repaired later).
	Cool()
}

// AheadHander is a Warmer that can hand the next job to its agent on
// standby before the runner's Start: the job's program starts at once
// (torchrun, up to its workers' start) while the attempt before it is
// still stopping, and its workers wait, gated (wire.Job.Gated), until Start
// releases them. HandAhead reports whether the job was handed: false
// when there is no agent on standby, or it was handed one already.
//
// The next Start on the runner releases the job when its job is the one
// handed ahead (the same JSON), and otherwise stops it, waits for it to
// end, and starts its own job cold. Cool and Close stop it like any agent
// on standby.
type AheadHander interface {
	Warmer
	HandAhead(job wire.Job) bool
}

// The head's side of the warm start: a runner keeps at most one agent on
// standby (Warmer.Warm), whose output waits until Start hands it its job.

// maxHeld bounds what an agent on standby may print before Start takes it;
// a warm interpreter prints nothing, so this is only a guard.
const maxHeld = 64 << 10

// switchWriter holds what is written until it is given its writer, then
// passes it on.
type switchWriter struct {
	mu   sync.Mutex
	w    io.Writer
	held bytes.Buffer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		return s.w.Write(p)
	}
	if room := maxHeld - s.held.Len(); room > 0 {
		s.held.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// set passes what was held, then everything after, to w.
func (s *switchWriter) set(w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = w.Write(s.held.Bytes())
	s.held = bytes.Buffer{}
	s.w = w
}

// agentOf is a Process whose agent a runner can still talk to.
type agentOf interface{ agent() *agentProcess }

func (p *agentProcess) agent() *agentProcess  { return p }
func (p *remoteProcess) agent() *agentProcess { return p.Process.(agentOf).agent() }

// heldWriter holds what is written until set gives it its writer.
type heldWriter interface {
	io.Writer
	set(w io.Writer)
}

// warmAgent is an agent on standby.
type warmAgent struct {
	proc     Process
	out, err heldWriter
	ask      *askStream // out, for a relayed job: the agent answers asks there
	// ahead is the job handed ahead (HandAhead), as JSON with Gated
	// unset: the job Start must bring for it to be released; nil: none.
	ahead []byte
}

// warmSlot is a runner's agent on standby, if any.
type warmSlot struct {
	mu   sync.Mutex
	a    *warmAgent
	cool int // how many times cool ran: a warm under way when it did is dropped
}

// warm starts an agent on standby for jobs like job with start (the
// runner's Start), replacing (and stopping) the one before.
func (s *warmSlot) warm(ctx context.Context, job wire.Job, start func(context.Context, wire.Job, io.Writer, io.Writer) (Process, error)) error {
	job.Standby = true
	s.mu.Lock()
	cooled := s.cool
	s.mu.Unlock()
	wa := &warmAgent{out: &switchWriter{}, err: &switchWriter{}}
	if job.Relay {
		wa.ask = newAskStream()
		wa.out = wa.ask
	}
	p, err := start(ctx, job, wa.out, wa.err)
	if err != nil {
		return err
	}
	wa.proc = p
	s.mu.Lock()
	if s.cool != cooled { // cooled while it started: not wanted any more
		s.mu.Unlock()
		p.Stop(true)
		return nil
	}
	old := s.a
	s.a = wa
	s.mu.Unlock()
	if old != nil {
		old.proc.Stop(true)
	}
	return nil
}

// coolDown stops the agent on standby, if any (and one still starting),
// and waits until it is gone,
// at most coolWait.
func (s *warmSlot) coolDown() {
	s.mu.Lock()
	a := s.a
	s.a = nil
	s.cool++
	s.mu.Unlock()
	if a == nil {
		return
	}
	stopAndWait(a.proc)
}

// coolWait bounds Cool's wait for the agent on standby to end.
const coolWait = 5 * time.Second

// handAhead hands job to the agent on standby, gated (wire.Job.Gated), and
// keeps the agent in the slot for take to release; false when there is
// none, it has ended, or it was handed a job ahead already.
func (s *warmSlot) handAhead(job wire.Job) bool {
	if job.Standby || job.Gated {
		return false
	}
	want, err := jobLine(job)
	if err != nil {
		return false
	}
	job.Gated = true
	line, err := jobLine(job)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.a
	if a == nil || a.ahead != nil || a.ended() {
		return false
	}
	a.ahead = want
	a.ctl().handJob(line)
	return true
}

// take hands job to the agent on standby and returns its Process, with
// its output going to stdout and stderr from now on; nil when there is
// none, or it has ended. An agent handed a job ahead (handAhead) is
// released when job is that job; otherwise it is stopped, and take
// returns nil once it has ended (at most coolWait): its job must not run
// beside the one Start starts instead.
func (s *warmSlot) take(job wire.Job, stdout, stderr io.Writer) Process {
	if job.Standby {
		return nil // Warm's own start
	}
	s.mu.Lock()
	a := s.a
	s.a = nil
	s.mu.Unlock()
	if a == nil || a.ended() {
		return nil
	}
	line, err := jobLine(job)
	if err != nil {
		a.proc.Stop(true)
		return nil
	}
	if a.ahead != nil {
		if !bytes.Equal(line, a.ahead) {
			stopAndWait(a.proc)
			return nil
		}
		a.out.set(stdout)
		a.err.set(stderr)
		a.ctl().release()
		return a.proc
	}
	a.out.set(stdout)
	a.err.set(stderr)
	a.ctl().handJob(line)
	return a.proc
}

// ctl is the agent's control stream.
func (a *warmAgent) ctl() *controlWriter { return a.proc.(agentOf).agent().ctl }

// ended reports whether the agent has exited.
func (a *warmAgent) ended() bool {
	select {
	case <-a.proc.(agentOf).agent().done:
		return true
	default:
		return false
	}
}

// stopAndWait kills p's job at once and waits until p has ended, at most
// coolWait (a lost link: its agent ends with its heartbeat).
func stopAndWait(p Process) {
	p.Stop(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Wait()
	}()
	t := time.NewTimer(coolWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
