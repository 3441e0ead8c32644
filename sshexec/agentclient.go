package sshexec

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// agentProcess is the head's side of one agent: it feeds the agent's stdin
// and copies its output. It implements Process.
type agentProcess struct {
	ctl  *controlWriter
	done chan struct{} // closed when the agent exited and output is copied
	code int
	err  error
}

var _ Process = (*agentProcess)(nil)

// attachAgent speaks the agent protocol over an agent's stdin, stdout and
// stderr, whichever transport started it. It writes the job line, sends a
// heartbeat every HeartbeatInterval and copies stdout to outW and stderr to
// errW. wait must block until the agent has exited and return its exit code,
// or -1 and an error when the agent or the node was lost.
//
// Once wait returns, stdin is closed; stdout and stderr are closed too, if
// they are io.Closers, after their copies end. On error the agent is told
// to go (its stdin is closed) and reaped in the background; the caller need
// not clean up.
func attachAgent(job wire.Job, stdin io.WriteCloser, stdout, stderr io.Reader,
	outW, errW io.Writer, wait func() (int, error)) (Process, error) {
	if outW == nil {
		outW = io.Discard
	}
	if errW == nil {
		errW = io.Discard
	}
	line, err := jobLine(job)
	if err != nil {
		err = fmt.Errorf("encode job: %w", err)
	} else if _, err = stdin.Write(append(line, '\n')); err != nil {
		err = fmt.Errorf("send job to agent: %w", err)
	}
	if err != nil {
		_ = stdin.Close()
		go func() {
			var wg sync.WaitGroup
			copyAndClose(&wg, io.Discard, stdout)
			copyAndClose(&wg, io.Discard, stderr)
			_, _ = wait()
			wg.Wait()
		}()
		return nil, err
	}

	p := &agentProcess{
		ctl:  newControlWriter(stdin, HeartbeatInterval),
		done: make(chan struct{}),
	}
	var copies sync.WaitGroup
	copyAndClose(&copies, outW, stdout)
	copyAndClose(&copies, errW, stderr)
	go func() {
		code, err := wait()
		p.ctl.close()
		// Closing also unblocks a heartbeat write stuck on a hung agent.
		_ = stdin.Close()
		copies.Wait()
		p.code, p.err = code, err
		close(p.done)
	}()
	return p, nil
}

// jobLine is job as the agent reads it, with the head's protocol version.
func jobLine(job wire.Job) ([]byte, error) {
	job.Protocol = wire.Protocol
	return json.Marshal(job)
}

// copyAndClose copies r to w in a goroutine, then closes r if it can be
// closed. When w fails, the rest is discarded: the agent's output must keep
// draining or the job would block on a full pipe.
func copyAndClose(wg *sync.WaitGroup, w io.Writer, r io.Reader) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := io.Copy(w, r); err != nil && w != io.Discard {
			_, _ = io.Copy(io.Discard, r)
		}
		if c, ok := r.(io.Closer); ok {
			_ = c.Close()
		}
	}()
}

// Wait implements Process.
func (p *agentProcess) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

// Tell implements Process. It never blocks.
func (p *agentProcess) Tell(msg ...byte) { p.ctl.relay(msg) }

// Stop implements Process. It never blocks.
func (p *agentProcess) Stop(now bool) { p.ctl.stop(now, false, 0, 0) }

// Interrupt implements Process. It never blocks.
func (p *agentProcess) Interrupt(sig syscall.Signal, grace time.Duration) {
	p.ctl.stop(false, true, sig, grace)
}

// Signal implements Process. It never blocks.
func (p *agentProcess) Signal(sig syscall.Signal) { p.ctl.signal(sig) }
