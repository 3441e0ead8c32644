package rank

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/sys/unix"
)

// The pool's client: a worker's supervisor takes its slot's interpreter
// from the node agent's pool (wire.PoolSocketVar), which becomes the
// worker; the pool's server is internal/agent's pool.go.

// Pooled is a worker that runs in a pooled interpreter (TakePooled).
type Pooled struct {
	PID int
	c   *net.UnixConn
	br  *bufio.Reader
}

// ErrTakeAbandoned is TakePooled's error when abandon closed before the
// pool answered.
var ErrTakeAbandoned = errors.New("abandoned while the pool was still importing")

// StoppedError is TakePooled's error when the agent was stopping the job
// before the worker started: the worker is not to start, and its
// supervisor ends as the worker would have by Signal.
type StoppedError struct{ Signal syscall.Signal }

func (e *StoppedError) Error() string {
	return fmt.Sprintf("the job was stopped (%s) before its worker started", unix.SignalName(e.Signal))
}

// TakePooled asks the pool at sock for slot take.Slot's interpreter to
// become the worker, with stdin, stdout and stderr as its streams. cold
// says why the worker cannot run there (the caller starts it itself); an
// error, that the pool could not be asked. Once abandon is closed it
// stops waiting for the pool (still importing), which then kills the
// slot: ErrTakeAbandoned. A *StoppedError says the job was stopped first.
func TakePooled(sock string, take wire.PoolTake, stdin, stdout, stderr *os.File, abandon <-chan struct{}) (p *Pooled, cold string, err error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, "", err
	}
	line, err := json.Marshal(take)
	if err != nil {
		c.Close()
		return nil, "", err
	}
	rights := unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	if err := wire.WriteWithRights(c, append(line, '\n'), rights); err != nil {
		c.Close()
		return nil, "", err
	}
	br := bufio.NewReader(c)
	type answer struct {
		r   wire.PoolReply
		err error
	}
	got := make(chan answer, 1)
	go func() {
		r, err := readReply(br)
		got <- answer{r, err}
	}()
	var r wire.PoolReply
	select {
	case a := <-got:
		r, err = a.r, a.err
	case <-abandon:
		c.Close() // the pool kills the slot, forked or not
		<-got
		return nil, "", ErrTakeAbandoned
	}
	switch {
	case err != nil:
		c.Close()
		return nil, "", err
	case r.Stopped > 0:
		c.Close()
		return nil, "", &StoppedError{Signal: syscall.Signal(r.Stopped)}
	case r.Cold != "" || r.PID <= 0:
		c.Close()
		return nil, r.Cold, nil
	}
	return &Pooled{PID: r.PID, c: c, br: br}, "", nil
}

func readReply(br *bufio.Reader) (wire.PoolReply, error) {
	var r wire.PoolReply
	line, err := wire.ReadLine(br, wire.MaxLine)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(line, &r)
}

// Wait waits for the worker's end and returns its wait status. When the
// agent is gone first (it was killed, and its interpreters with it),
// Wait reports a SIGKILL.
func (p *Pooled) Wait() unix.WaitStatus {
	defer p.c.Close()
	r, err := readReply(p.br)
	if err != nil || r.Status == nil {
		_ = unix.Kill(-p.PID, syscall.SIGKILL)
		return unix.WaitStatus(syscall.SIGKILL)
	}
	return unix.WaitStatus(*r.Status)
}

// Close hangs up on the pool without waiting for the worker, as a
// supervisor that is killed does: the agent then kills the worker.
func (p *Pooled) Close() error { return p.c.Close() }
