package sshexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/crypto/ssh"
)

// Remote is a Runner for one node over one SSH connection, reused for every
// command and job: Go's client's (Dial) or the system ssh's (Config.SSHCommand).
// It is safe for concurrent use. OpenSSH's sshd allows 10 sessions per
// connection at once by default (MaxSessions).
type Remote struct {
	node string
	addr string // host:port actually dialled
	user string
	cfg  Config
	link link
	jump *Remote // the ProxyJump hop of Go's client, owned by this Remote

	dead    chan struct{} // closed when the connection is gone
	deadErr error         // why; written before dead is closed

	mu     sync.Mutex
	closed bool
	procs  map[Process]struct{}

	upload uploadCache
	warm   warmSlot // an agent on standby (Warm)
}

var _ Runner = (*Remote)(nil)

// watch records when and why the connection ends.
func (r *Remote) watch() {
	err := r.link.wait()
	r.mu.Lock()
	if r.deadErr == nil {
		r.deadErr = err
	}
	r.mu.Unlock()
	close(r.dead)
}

// keepalive sends keepalive@openssh.com over Go's client c every interval;
// after max consecutive requests unanswered within interval, it closes the
// connection, so every session's Wait returns an error. Any reply, even a
// refusal, proves the peer alive. (The system ssh keeps its own:
// ServerAliveInterval.)
func (r *Remote) keepalive(c *ssh.Client, interval time.Duration, max int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-r.dead:
			return
		case <-t.C:
		}
		reply := make(chan error, 1)
		go func() {
			_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		timer := time.NewTimer(interval)
		select {
		case <-r.dead:
			timer.Stop()
			return
		case err := <-reply:
			timer.Stop()
			if err != nil {
				return // connection already closed; watch reports it
			}
			missed = 0
			continue
		case <-timer.C:
			missed++
		}
		if missed >= max {
			r.mu.Lock()
			if r.deadErr == nil && !r.closed {
				r.deadErr = fmt.Errorf("connection lost: %d keepalives in a row unanswered (one every %v)", missed, interval)
			}
			r.mu.Unlock()
			c.Close()
			return
		}
	}
}

// lostAfter is lost for a session that ended without an exit status: that
// is the connection going down, and the watcher may not have recorded why
// yet, so it waits a moment for it.
func (r *Remote) lostAfter(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.dead:
	case <-t.C:
	}
	return r.lost()
}

// lost returns why the connection ended, or nil if it is still up.
func (r *Remote) lost() error {
	select {
	case <-r.dead:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			return ErrClosed
		}
		if r.deadErr == nil || errors.Is(r.deadErr, io.EOF) {
			return errors.New("connection lost")
		}
		return r.deadErr
	default:
		return nil
	}
}

// Lost returns why the connection ended, or nil while it is up: a runner
// whose connection is lost stays so, and the node must be dialled again.
func (r *Remote) Lost() error { return r.lost() }

// Node implements Runner: the name the node was dialled by.
func (r *Remote) Node() string { return r.node }

// Addr is the host:port the connection goes to.
func (r *Remote) Addr() string { return r.addr }

// newSession opens a session, giving up when ctx ends or the link dies.
func (r *Remote) newSession(ctx context.Context) (session, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	type result struct {
		s   session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := r.link.newSession()
		ch <- result{s, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			if lost := r.lost(); lost != nil {
				return nil, fmt.Errorf("open session: %w", lost)
			}
			return nil, fmt.Errorf("open session: %w", res.err)
		}
		return res.s, nil
	case <-ctx.Done():
		go func() {
			if res := <-ch; res.s != nil {
				res.s.Close()
			}
		}()
		return nil, fmt.Errorf("open session: %w", ctx.Err())
	}
}

// Output implements Runner. argv is joined with shell.QuoteArgv and run by the
// remote user's shell. When ctx ends, the session is closed and Output
// returns; the remote command then sees its stdin and output close.
func (r *Remote) Output(ctx context.Context, argv []string) ([]byte, error) {
	out, err := r.output(ctx, argv, nil)
	if err != nil {
		return out, fmt.Errorf("node %s: %w", r.node, err)
	}
	return out, nil
}

func (r *Remote) output(ctx context.Context, argv []string, stdin io.Reader) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("run: empty command")
	}
	return r.run(ctx, shell.QuoteArgv(argv), stdin)
}

// outputCmd runs a command line already quoted; errors wrap *ExitError
// when the command ran and exited non-zero.
func (r *Remote) outputCmd(ctx context.Context, cmd string) ([]byte, error) {
	return r.run(ctx, cmd, nil)
}

func (r *Remote) run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	sess, err := r.newSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", cmd, err)
	}
	defer sess.Close()
	type result struct {
		stdout, stderr []byte
		err            error
	}
	done := make(chan result, 1)
	go func() {
		stdout, stderr, err := runSession(sess, cmd, stdin)
		done <- result{stdout, stderr, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		sess.Close()
		return nil, fmt.Errorf("run %s: %w", cmd, ctx.Err())
	}
	if res.err == nil {
		return res.stdout, nil
	}
	tail := strings.TrimSpace(lastBytes(res.stderr, wire.StderrTail))
	if code, ok := exitStatus(res.err); ok {
		return res.stdout, &ExitError{Cmd: cmd, Code: code, Stderr: tail}
	}
	err = res.err
	if lost := r.lostAfter(2 * time.Second); lost != nil {
		err = lost
	}
	return res.stdout, fmt.Errorf("run %s: %w", cmd, err)
}

// ExitError is a command that ran on the node and exited non-zero.
type ExitError struct {
	Cmd    string
	Code   int
	Stderr string // its last bytes
}

func (e *ExitError) Error() string {
	if e.Stderr == "" {
		return fmt.Sprintf("run %s: exit code %d", e.Cmd, e.Code)
	}
	return fmt.Sprintf("run %s: exit code %d: %s", e.Cmd, e.Code, e.Stderr)
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		return "…" + string(b[len(b)-n:])
	}
	return string(b)
}

// Start implements Runner: it runs the node agent (`<remote gorun> _agent`)
// in a session and hands it job. The remote gorun is Config.RemoteGorun or
// the path EnsureAgent uploaded to; one of them must be set first. ctx
// bounds starting only; a started job is stopped with Stop.
func (r *Remote) Start(ctx context.Context, job wire.Job, stdout, stderr io.Writer) (Process, error) {
	if p := r.warm.take(job, stdout, stderr); p != nil {
		return p, nil
	}
	p, err := r.start(ctx, job, stdout, stderr)
	if err != nil {
		return nil, fmt.Errorf("node %s: start agent: %w", r.node, err)
	}
	return p, nil
}

func (r *Remote) start(ctx context.Context, job wire.Job, stdout, stderr io.Writer) (Process, error) {
	gorun := r.agentPath()
	if gorun == "" && r.cfg.Agent.Name == "" {
		return nil, errors.New("no gorun on the node: set --remote-gorun or upload it first (EnsureAgent)")
	}
	sess, err := r.newSession(ctx)
	if err != nil {
		return nil, err
	}
	stdin, err := sess.StdinPipe()
	var outR, errR io.Reader
	if err == nil {
		outR, err = sess.StdoutPipe()
	}
	if err == nil {
		errR, err = sess.StderrPipe()
	}
	if err == nil {
		if gorun != "" {
			err = sess.Start(shell.QuoteArgv([]string{gorun, wire.AgentCommand}))
		} else {
			err = sess.Start(launchCommand(r.cfg.Agent, r.cfg.Others, true, wire.AgentCommand))
		}
	}
	if err != nil {
		sess.Close()
		return nil, err
	}
	if gorun == "" {
		// The launcher names the copy it runs, or nothing when the node
		// lacks it: then upload it and start again, in a new session.
		path, err := readLauncherLine(outR)
		if err != nil {
			sess.Close()
			if _, err := r.EnsureAgent(ctx, r.cfg.Agent); err != nil {
				return nil, err
			}
			return r.start(ctx, job, stdout, stderr)
		}
		r.knowAgent(path)
	}

	tracked := &remoteProcess{r: r}
	wait := func() (int, error) {
		err := sess.Wait()
		sess.Close()
		r.forget(tracked)
		if err == nil {
			return 0, nil
		}
		if code, ok := exitStatus(err); ok {
			return code, nil
		}
		if lost := r.lostAfter(2 * time.Second); lost != nil {
			return -1, fmt.Errorf("node %s: agent lost: %w", r.node, lost)
		}
		return -1, fmt.Errorf("node %s: agent lost: %w", r.node, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock() // wait's forget waits for the registration below
	p, err := attachAgent(job, stdin, outR, errR, stdout, stderr, wait)
	if err != nil {
		return nil, err
	}
	tracked.Process = p
	if r.closed {
		p.Stop(true)
	} else {
		r.procs[tracked] = struct{}{}
	}
	return tracked, nil
}

// Warm implements Warmer.
func (r *Remote) Warm(ctx context.Context, job wire.Job) error { return r.warm.warm(ctx, job, r.Start) }

// Cool stops the agent on standby, if any (Warmer).
func (r *Remote) Cool() { r.warm.coolDown() }

// HandAhead implements AheadHander.
func (r *Remote) HandAhead(job wire.Job) bool { return r.warm.handAhead(job) }

var _ Warmer = (*Remote)(nil)

// remoteProcess is an agent's Process, known to its Remote until it ends.
type remoteProcess struct {
	Process
	r *Remote
}

func (r *Remote) forget(p *remoteProcess) {
	r.mu.Lock()
	delete(r.procs, p)
	r.mu.Unlock()
}

// closeWait bounds how long Close waits for stopped jobs before cutting
// the connection (the agents then see EOF and kill what is left).
const closeWait = 10 * time.Second

// Close implements Runner: running jobs are stopped (SIGTERM, grace,
// SIGKILL) and waited for up to 10 s, then the connection (and any jump
// connection) is closed.
func (r *Remote) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	procs := make([]Process, 0, len(r.procs))
	for p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()

	for _, p := range procs {
		p.Stop(false)
	}
	deadline := time.NewTimer(closeWait)
	defer deadline.Stop()
	for _, p := range procs {
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-deadline.C:
		case <-r.dead:
		}
	}
	err := r.link.close()
	<-r.dead
	if r.jump != nil {
		r.jump.Close()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("node %s: close: %w", r.node, err)
	}
	return nil
}
