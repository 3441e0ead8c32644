package sshexec

import (
	"encoding/binary"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// appendTerm appends a wire.CtlTerm message, or with outside set a wire.CtlInterrupt.
func appendTerm(dst []byte, outside bool, sig syscall.Signal, grace time.Duration) []byte {
	b := byte(wire.CtlTerm)
	if outside {
		b = wire.CtlInterrupt
	}
	dst = append(dst, b, byte(sig), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(min(grace.Milliseconds(), 1<<32-1)))
	return dst
}

// Stop levels a controlWriter has been asked for, in increasing order.
const (
	stopNone = iota
	stopTerm
	stopKill
)

// controlWriter owns the agent's stdin on the head side. One goroutine does
// every write, so a write that blocks (a full SSH window, a hung agent)
// never blocks the callers of stop or close.
type controlWriter struct {
	w        io.Writer
	interval time.Duration

	mu        sync.Mutex
	requested int            // highest stop level asked for
	sig       syscall.Signal // the stop's signal, for stopTerm
	grace     time.Duration  // the stop's grace, for stopTerm
	outside   bool           // the stop's signal came to the head from outside

	wake chan struct{} // capacity 1: a stop level was raised
	tell chan []byte   // messages for the relay clients; full means dropped
	job  chan []byte   // a job line for an agent on standby
	rel  chan struct{} // wire.CtlRelease, once
	quit chan struct{} // closed by close
	done chan struct{} // closed when the goroutine returns
	once sync.Once
}

// newControlWriter starts the writer goroutine: a heartbeat every interval
// and the stop bytes asked for through stop.
func newControlWriter(w io.Writer, interval time.Duration) *controlWriter {
	c := &controlWriter{
		w:        w,
		interval: interval,
		wake:     make(chan struct{}, 1),
		tell:     make(chan []byte, 16),
		job:      make(chan []byte, 1),
		rel:      make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go c.run()
	return c
}

// stop asks the agent to stop the job, without waiting: each worker gets
// sig (0: SIGTERM) and what is left after grace (0: wire.Job.Grace) is killed;
// with now set, the whole tree is killed at once; outside says the head
// got sig from outside (wire.CtlInterrupt). The first stop's signal and grace
// hold: asking again sends nothing, but a kill after a stop still goes
// out.
func (c *controlWriter) stop(now, outside bool, sig syscall.Signal, grace time.Duration) {
	level := stopTerm
	if now {
		level = stopKill
	}
	c.mu.Lock()
	raised := level > c.requested
	if raised {
		if c.requested == stopNone {
			c.sig, c.grace, c.outside = sig, grace, outside
		}
		c.requested = level
	}
	c.mu.Unlock()
	if raised {
		select {
		case c.wake <- struct{}{}:
		default: // a wake-up is already pending; run reads the latest level
		}
	}
}

// relay queues b for the agent to pass to its relay clients, without
// waiting; when the queue is full (the agent is not reading) it is dropped.
func (c *controlWriter) relay(msg []byte) {
	line := make([]byte, 0, 2*len(msg))
	for _, b := range msg {
		line = append(line, wire.CtlTell, b)
	}
	c.queue(line)
}

// signal queues sig for the agent to pass to every worker once.
func (c *controlWriter) signal(sig syscall.Signal) { c.queue([]byte{wire.CtlSignal, byte(sig)}) }

func (c *controlWriter) queue(msg []byte) {
	select {
	case c.tell <- msg:
	default:
	}
}

// handJob queues the job line for an agent on standby, without waiting;
// it is sent before any later heartbeat or stop.
func (c *controlWriter) handJob(line []byte) {
	select {
	case c.job <- line:
	default: // one job per agent: a second is dropped
	}
}

// release queues wire.CtlRelease, without waiting; it is sent after the job
// line and before any later stop.
func (c *controlWriter) release() {
	select {
	case c.rel <- struct{}{}:
	default: // released already
	}
}

// askLine queues an ask (wire.CtlAsk) for an agent on standby, without
// waiting; false when the queue is full.
func (c *controlWriter) askLine(line []byte) bool {
	select {
	case c.tell <- append(append([]byte{wire.CtlAsk}, line...), '\n'):
		return true
	default:
		return false
	}
}

// close stops the heartbeat. It does not wait for a write in progress.
func (c *controlWriter) close() {
	c.once.Do(func() { close(c.quit) })
}

func (c *controlWriter) run() {
	defer close(c.done)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	sent := stopNone
	for {
		// A job line goes before whatever else is pending: a stop asked
		// right after it is for the job.
		select {
		case line := <-c.job:
			if _, err := c.w.Write(append(append([]byte{wire.CtlJob}, line...), '\n')); err != nil {
				return
			}
			continue
		default:
		}
		// A release goes before a stop asked after it, and after the job.
		select {
		case <-c.rel:
			if _, err := c.w.Write([]byte{wire.CtlRelease}); err != nil {
				return
			}
			continue
		default:
		}
		select {
		case <-c.quit:
			return
		case <-c.wake:
			c.mu.Lock()
			level, sig, grace, outside := c.requested, c.sig, c.grace, c.outside
			c.mu.Unlock()
			if level <= sent {
				continue
			}
			msg := []byte{wire.CtlKill}
			if level == stopTerm {
				msg = appendTerm(nil, outside, sig, grace)
			}
			if _, err := c.w.Write(msg); err != nil {
				return // agent gone; Wait reports it
			}
			sent = level
		case msg := <-c.tell:
			if _, err := c.w.Write(msg); err != nil {
				return
			}
		case line := <-c.job:
			msg := append(append([]byte{wire.CtlJob}, line...), '\n')
			if _, err := c.w.Write(msg); err != nil {
				return
			}
		case <-c.rel:
			if _, err := c.w.Write([]byte{wire.CtlRelease}); err != nil {
				return
			}
		case <-tick.C:
			if _, err := c.w.Write([]byte{wire.CtlHeartbeat}); err != nil {
				return
			}
		}
	}
}
