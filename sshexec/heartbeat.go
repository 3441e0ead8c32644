package sshexec

import (
	"io"
	"sync"
	"time"
)

// Control bytes the head sends to the agent after the job line.
const (
	ctlHeartbeat = 'h' // the head is alive
	ctlTerm      = 't' // stop the job: SIGTERM, grace, SIGKILL
	ctlKill      = 'k' // SIGKILL the job's whole tree now
	ctlTell      = 'r' // the next byte goes to every relay client
	ctlJob       = 'j' // a job line follows, for an agent on standby
	ctlQuick     = 'q' // stop for a restart: freeze the main process, stop the rest, then kill it
)

// Stop levels a controlWriter has been asked for, in increasing order.
const (
	stopNone = iota
	stopQuick
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
	requested int // highest stop level asked for

	wake chan struct{} // capacity 1: a stop level was raised
	tell chan byte     // bytes for the relay clients; full means dropped
	job  chan []byte   // a job line for an agent on standby
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
		tell:     make(chan byte, 16),
		job:      make(chan []byte, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go c.run()
	return c
}

// stop asks the agent to stop the job, without waiting. Asking twice for
// the same level sends one byte; a kill after a term still goes out.
func (c *controlWriter) stop(now bool) {
	level := stopTerm
	if now {
		level = stopKill
	}
	c.raise(level)
}

// raise asks for a stop level; one that is not above the last asked for
// sends nothing.
func (c *controlWriter) raise(level int) {
	c.mu.Lock()
	raised := level > c.requested
	if raised {
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
func (c *controlWriter) relay(b byte) {
	select {
	case c.tell <- b:
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
			if _, err := c.w.Write(append(append([]byte{ctlJob}, line...), '\n')); err != nil {
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
			level := c.requested
			c.mu.Unlock()
			if level <= sent {
				continue
			}
			b := byte(ctlTerm)
			switch level {
			case stopKill:
				b = ctlKill
			case stopQuick:
				b = ctlQuick
			}
			if _, err := c.w.Write([]byte{b}); err != nil {
				return // agent gone; Wait reports it
			}
			sent = level
		case b := <-c.tell:
			if _, err := c.w.Write([]byte{ctlTell, b}); err != nil {
				return
			}
		case line := <-c.job:
			msg := append(append([]byte{ctlJob}, line...), '\n')
			if _, err := c.w.Write(msg); err != nil {
				return
			}
		case <-tick.C:
			if _, err := c.w.Write([]byte{ctlHeartbeat}); err != nil {
				return
			}
		}
	}
}
