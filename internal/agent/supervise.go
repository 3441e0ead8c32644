package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/sys/unix"
)

// The supervision loop: what the head asks on the agent's stdin (readControl)
// and what the agent does about it, its signals and its job's end, until
// the whole tree is gone (supervise).

// quickPoll is how often a quick stop looks whether the job's main
// process is the last one left.
const quickPoll = 20 * time.Millisecond

// killRepeat is how often the agent re-scans /proc and SIGKILLs what is
// left once it has escalated, until the last descendant is reaped.
const killRepeat = 50 * time.Millisecond

// control is one message the head sent after the job line.
type control struct {
	b     byte           // wire.CtlTerm, wire.CtlInterrupt, wire.CtlKill, wire.CtlHeartbeat, wire.CtlTell, wire.CtlSignal, wire.CtlAsk
	arg   byte           // wire.CtlTell's byte
	line  []byte         // wire.CtlAsk's request
	sig   syscall.Signal // wire.CtlTerm's, wire.CtlInterrupt's (0: SIGTERM) or wire.CtlSignal's signal
	grace time.Duration  // wire.CtlTerm's grace (0: wire.Job.Grace)
}

// treeState is how far the agent is in ending its job's tree. It only
// moves forward:
//
//	running ─► stopping ─► killing
//	running ─► killing      (the head's kill, before any stop)
//
// treeEnd.enter is the one place it changes; a kill while killing sends
// SIGKILL again and stays.
type treeState int

const (
	// treeRunning: the job runs, and the head's heartbeats are awaited.
	treeRunning treeState = iota
	// treeStopping: the stop's signal is out and its grace runs; a quick
	// stop (a relayed job's) also watches for torchrun left alone.
	treeStopping
	// treeKilling: SIGKILL went to the tree, and goes again every
	// killRepeat until the last descendant is reaped.
	treeKilling
)

func (st treeState) String() string {
	switch st {
	case treeRunning:
		return "running"
	case treeStopping:
		return "stopping"
	case treeKilling:
		return "killing"
	}
	return fmt.Sprintf("treeState(%d)", int(st))
}

// canMoveTo reports whether next may follow st: forward only.
func (st treeState) canMoveTo(next treeState) bool {
	switch next {
	case treeStopping:
		return st == treeRunning
	case treeKilling:
		return st != treeKilling
	}
	return false
}

// treeEnd is the end of the job's tree under way: its state, the stop's
// signal and grace, and the timers each state runs on.
type treeEnd struct {
	state treeState
	sig   syscall.Signal // the stop's, once stopping
	grace time.Duration  // the stop's grace, once stopping
	// quick: a relayed job's stop, which watches the tree (pollTicker,
	// the relay's hang-ups) for torchrun left alone.
	quick bool
	// leftSignalled: the rest of the tree had the stop's signal.
	leftSignalled bool
	// lookNow: a quick stop looks at once whether torchrun is alone.
	lookNow bool

	graceTimer *time.Timer  // stopping: the grace
	pollTicker *time.Ticker // stopping quickly: the look for torchrun alone
	killTicker *time.Ticker // killing: SIGKILL again
}

// enter moves the tree's end to state next. A move the states do not
// allow is a bug in the agent, and panics.
func (e *treeEnd) enter(next treeState) {
	if !e.state.canMoveTo(next) {
		panic(fmt.Sprintf("agent: tree state %q cannot move to %q", e.state, next))
	}
	e.state = next
}

// watching reports whether a quick stop watches the tree: stopping, not
// yet killing.
func (e *treeEnd) watching() bool { return e.quick && e.state == treeStopping }

// graceC fires when a stop's grace is over; nil outside stopping.
func (e *treeEnd) graceC() <-chan time.Time {
	if e.state != treeStopping {
		return nil
	}
	return e.graceTimer.C
}

// pollC ticks while a quick stop watches the tree; nil otherwise.
func (e *treeEnd) pollC() <-chan time.Time {
	if !e.watching() {
		return nil
	}
	return e.pollTicker.C
}

// killC ticks while killing; nil before.
func (e *treeEnd) killC() <-chan time.Time {
	if e.state != treeKilling {
		return nil
	}
	return e.killTicker.C
}

// stopTimers stops whatever timer the end started.
func (e *treeEnd) stopTimers() {
	if e.graceTimer != nil {
		e.graceTimer.Stop()
	}
	if e.killTicker != nil {
		e.killTicker.Stop()
	}
	if e.pollTicker != nil {
		e.pollTicker.Stop()
	}
}

// supervise runs until every descendant is reaped and returns the job's
// exit code.
//
// A stop of a relayed job (torchrun's) freezes its main process first
// (SIGSTOP), so torchrun neither reacts to its workers' ends nor prints a
// shutdown of its own, and tells every relay client (a worker's
// supervisor) to give its worker the stop's signal, once. Once no client
// is left, whatever else is left gets the signal too, and the main process
// is killed as soon as it is alone; what is still there after the grace is
// killed. Other jobs get the signal on every process, then the grace.
func (a *agent) supervise(ctx context.Context, job wire.Job, r *reaper, ctl <-chan control, sigs <-chan os.Signal) int {
	heartbeat := job.Heartbeat
	if heartbeat <= 0 {
		heartbeat = wire.DefaultHeartbeatTimeout
	}
	shortGrace := job.Grace
	if shortGrace <= 0 {
		shortGrace = wire.DefaultGrace
	}
	outsideGrace := job.StopGrace
	if outsideGrace <= 0 {
		outsideGrace = shortGrace
	}

	hb := time.NewTimer(heartbeat)
	defer hb.Stop()
	var (
		end      treeEnd
		mainDone = r.mainDone
		mainGone bool
		ctxDone  = ctx.Done()
	)
	defer end.stopTimers()
	// signalLeft gives the stop's signal to every live process of the
	// tree but the main one, once each.
	signalLeft := func() int {
		end.leftSignalled = true
		n, err := signalProcs(a.self, r.main, end.sig)
		if err != nil {
			a.logf("stop: %v", err)
		}
		return n
	}
	stop := func(sig syscall.Signal, grace time.Duration, why string, tell byte) {
		if end.state != treeRunning {
			return
		}
		end.enter(treeStopping)
		hb.Stop()
		a.asks.endAhead() // a job handed ahead may hold one; the tree's end waits for it
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		end.sig = sig
		n := 0
		if a.relay != nil {
			if !mainGone {
				_ = unix.Kill(r.main, syscall.SIGSTOP)
			}
			a.pool.abandon(sig) // no worker starts after this
			if n = a.relay.stop([]byte{tell, byte(sig)}); n == 0 {
				n = signalLeft()
			}
			end.pollTicker = time.NewTicker(quickPoll)
			end.quick, end.lookNow = true, true
		} else {
			var err error
			if n, err = signalTree(a.self, sig); err != nil {
				a.logf("stop: %v", err)
			}
		}
		if why != "" && n > 0 {
			a.logf("%s; %s to %d processes, SIGKILL after %v", why, unix.SignalName(sig), n, grace)
		}
		end.grace = grace
		end.graceTimer = time.NewTimer(grace)
	}
	kill := func(why string) {
		hb.Stop()
		a.asks.endAhead()
		if end.state != treeKilling {
			end.enter(treeKilling)
			end.killTicker = time.NewTicker(killRepeat)
		}
		n, err := signalTree(a.self, syscall.SIGKILL)
		if err != nil {
			a.logf("kill: %v", err)
		}
		if why != "" && n > 0 {
			a.logf("%s; sending SIGKILL to %d processes", why, n)
		}
	}

	// lookAlone is a quick stop's look, on its ticks and whenever a
	// worker's supervisor hangs up. Once no supervisor is left, every
	// worker is gone: the rest of the tree gets the stop's signal, and
	// torchrun, frozen, is killed at once (it is kept until then because
	// its store serves the workers through their grace). Its end, the
	// teardown of its memory, then runs beside the supervisors' own ends
	// (they go to the agent as their parent), not after them. The tree is
	// killed as soon as nothing but torchrun is left.
	lookAlone := func() {
		if !end.watching() {
			return
		}
		if !end.leftSignalled && a.relay.clients() == 0 {
			signalLeft()
			if !mainGone {
				_ = unix.Kill(r.main, syscall.SIGKILL)
			}
		}
		if aloneLeft(a.self, r.main) {
			end.pollTicker.Stop()
			kill("")
		}
	}

	if a.released {
		a.release()
	}
	for {
		if end.lookNow {
			end.lookNow = false
			lookAlone()
		}
		var hungUp <-chan struct{}
		if end.watching() {
			hungUp = a.relay.hungUp
		}
		select {
		case <-r.allGone:
			return r.exitCode()
		case <-mainDone:
			mainDone, mainGone = nil, true
			a.pool.dropIdle() // the job is over: its pool with it, and said nothing of
			stop(0, shortGrace, "job exited, leaving processes behind", wire.RelayStop)
		case c, ok := <-ctl:
			if !ok {
				ctl = nil
				stop(0, shortGrace, "head gone (stdin closed)", wire.RelayStop)
				continue
			}
			if end.state == treeRunning {
				hb.Reset(heartbeat)
			}
			switch c.b {
			case wire.CtlRelease:
				a.release()
			case wire.CtlAsk:
				// A job handed ahead (wire.Job.Gated) is asked what an agent on
				// standby is (standbyask.go) until it is released.
				go a.answer(ctx, c.line)
			case wire.CtlTell:
				if a.relay != nil {
					a.relay.tell([]byte{c.arg})
				}
			case wire.CtlSignal:
				if a.relay != nil && end.state != treeKilling {
					a.relay.tell([]byte{wire.RelaySignal, byte(c.sig)})
				}
			case wire.CtlTerm, wire.CtlInterrupt:
				grace := c.grace
				if grace <= 0 {
					grace = shortGrace
				}
				tell := wire.RelayStop
				if c.b == wire.CtlInterrupt {
					tell = wire.RelayHad
				}
				stop(c.sig, grace, "", tell)
			case wire.CtlKill:
				kill("")
			}
		case <-hb.C:
			stop(0, shortGrace, fmt.Sprintf("no heartbeat from head for %v", heartbeat), wire.RelayStop)
		case <-end.graceC():
			kill(fmt.Sprintf("still running after grace of %v", end.grace))
		case <-end.killC():
			kill("")
		case <-end.pollC():
			lookAlone()
		case <-hungUp:
			lookAlone()
		case s := <-sigs:
			sig, ok := s.(syscall.Signal)
			if !ok || sig == syscall.SIGPIPE {
				continue
			}
			// Sent to the agent itself: by Slurm to every process of the
			// step (scancel, srun forwarding a signal), or by hand. The
			// workers hear of it once, from their supervisors.
			stop(sig, outsideGrace, "got "+unix.SignalName(sig), wire.RelayHad)
		case <-ctxDone:
			ctxDone = nil
			stop(0, shortGrace, "cancelled", wire.RelayStop)
		}
	}
}

type jobOrErr struct {
	job wire.Job
	err error
}

// readControl reads the job line, then control messages until EOF, when
// it closes ctl. It gives up when done is closed.
func readControl(stdin io.Reader, jobc chan<- jobOrErr, ctl chan<- control, done <-chan struct{}) {
	defer close(ctl)
	br := bufio.NewReader(stdin)
	line, err := wire.ReadLine(br, wire.MaxLine)
	if err != nil {
		jobc <- jobOrErr{err: err}
		return
	}
	var job wire.Job
	if err := json.Unmarshal(line, &job); err != nil {
		jobc <- jobOrErr{err: fmt.Errorf("decode job: %w", err)}
		return
	}
	jobc <- jobOrErr{job: job}
	for {
		b, err := br.ReadByte()
		if err != nil {
			return // EOF, or any read error: the head is gone either way
		}
		c := control{b: b}
		switch b {
		case wire.CtlJob:
			if !job.Standby {
				continue
			}
			// The job the agent stood by for; said once.
			job.Standby = false
			line, err := wire.ReadLine(br, wire.MaxLine)
			var next wire.Job
			if err == nil {
				err = json.Unmarshal(line, &next)
			}
			select {
			case jobc <- jobOrErr{job: next, err: err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
			continue
		case wire.CtlTell, wire.CtlSignal:
			arg, err := br.ReadByte()
			if err != nil {
				return
			}
			c.arg, c.sig = arg, syscall.Signal(arg)
		case wire.CtlAsk:
			line, err := wire.ReadLine(br, wire.MaxLine)
			if err != nil {
				return
			}
			c.line = line
		case wire.CtlTerm, wire.CtlInterrupt:
			var m [wire.TermLen - 1]byte
			if _, err := io.ReadFull(br, m[:]); err != nil {
				return
			}
			c.sig = syscall.Signal(m[0])
			c.grace = time.Duration(binary.BigEndian.Uint32(m[1:])) * time.Millisecond
		}
		select {
		case ctl <- c:
		case <-done:
			return
		}
	}
}
