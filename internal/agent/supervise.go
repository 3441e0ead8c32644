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
		stopping, killing bool
		stopSig           syscall.Signal
		stopGrace         time.Duration
		leftSignalled     bool // the rest of the tree had the stop's signal
		graceC            <-chan time.Time
		killC             <-chan time.Time
		pollC             <-chan time.Time
		hungUp            <-chan struct{}
		lookNow           bool // a quick stop looks at once whether torchrun is alone
		mainDone          = r.mainDone
		mainGone          bool
		ctxDone           = ctx.Done()
		graceTimer        *time.Timer
		killTicker        *time.Ticker
		pollTicker        *time.Ticker
	)
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
		if killTicker != nil {
			killTicker.Stop()
		}
		if pollTicker != nil {
			pollTicker.Stop()
		}
	}()
	// signalLeft gives the stop's signal to every live process of the
	// tree but the main one, once each.
	signalLeft := func() int {
		leftSignalled = true
		n, err := signalProcs(a.self, r.main, stopSig)
		if err != nil {
			a.logf("stop: %v", err)
		}
		return n
	}
	stop := func(sig syscall.Signal, grace time.Duration, why string, tell byte) {
		if stopping {
			return
		}
		stopping = true
		hb.Stop()
		a.asks.endAhead() // a job handed ahead may hold one; the tree's end waits for it
		if sig == 0 {
			sig = syscall.SIGTERM
		}
		stopSig = sig
		n := 0
		if a.relay != nil {
			if !mainGone {
				_ = unix.Kill(r.main, syscall.SIGSTOP)
			}
			a.pool.abandon(sig) // no worker starts after this
			if n = a.relay.stop([]byte{tell, byte(sig)}); n == 0 {
				n = signalLeft()
			}
			pollTicker = time.NewTicker(quickPoll)
			pollC, hungUp, lookNow = pollTicker.C, a.relay.hungUp, true
		} else {
			var err error
			if n, err = signalTree(a.self, sig); err != nil {
				a.logf("stop: %v", err)
			}
		}
		if why != "" && n > 0 {
			a.logf("%s; %s to %d processes, SIGKILL after %v", why, unix.SignalName(sig), n, grace)
		}
		stopGrace = grace
		graceTimer = time.NewTimer(grace)
		graceC = graceTimer.C
	}
	kill := func(why string) {
		stopping = true
		hb.Stop()
		a.asks.endAhead()
		if !killing {
			killing = true
			graceC, pollC, hungUp = nil, nil, nil
			killTicker = time.NewTicker(killRepeat)
			killC = killTicker.C
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
		if pollC == nil || killing {
			return
		}
		if !leftSignalled && a.relay.clients() == 0 {
			signalLeft()
			if !mainGone {
				_ = unix.Kill(r.main, syscall.SIGKILL)
			}
		}
		if aloneLeft(a.self, r.main) {
			pollTicker.Stop()
			pollC, hungUp = nil, nil
			kill("")
		}
	}

	if a.released {
		a.release()
	}
	for {
		if lookNow {
			lookNow = false
			lookAlone()
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
			if !stopping {
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
				if a.relay != nil && !killing {
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
		case <-graceC:
			kill(fmt.Sprintf("still running after grace of %v", stopGrace))
		case <-killC:
			kill("")
		case <-pollC:
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
