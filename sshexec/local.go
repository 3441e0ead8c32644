package sshexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/sys/unix"
)

// Local runs commands on this machine. Jobs run under a local agent, the
// same program the head uploads to remote nodes, so a local job is torn
// down exactly like a remote one.
type Local struct {
	node string // "localhost", or the node srun reaches (Srun)
	// launcher starts every command: nil runs it here; Srun's is an srun
	// command line that runs it as a job step on the node.
	launcher []string
	// stop asks a started command to end when its ctx does; nil kills its
	// process group at once.
	stop func(*exec.Cmd) error

	agentBinary string
	// agentEnv is the agent's environment; nil inherits this process's.
	agentEnv []string
	warm     warmSlot // an agent on standby (Warm)

	mu     sync.Mutex
	closed bool
	procs  map[*agentProcess]struct{}
}

var _ Runner = (*Local)(nil)

// ErrClosed is returned by a Runner used after Close.
var ErrClosed = errors.New("runner closed")

// outputWaitDelay bounds how long Output waits for the output pipes after
// its command was killed, in case a grandchild still holds them.
const outputWaitDelay = 2 * time.Second

// NewLocal returns a Runner for this machine. agentBinary is the gorun
// binary to run as `<agentBinary> _agent` (main passes os.Executable()).
func NewLocal(agentBinary string) *Local {
	return &Local{node: "localhost", agentBinary: agentBinary, procs: map[*agentProcess]struct{}{}}
}

// Node implements Runner.
func (l *Local) Node() string { return l.node }

// Addr implements Runner: Local reaches no address.
func (l *Local) Addr() string { return "" }

// command returns argv as a child of this process, through the launcher.
func (l *Local) command(argv ...string) *exec.Cmd {
	argv = append(append([]string(nil), l.launcher...), argv...)
	return exec.Command(argv[0], argv[1:]...)
}

// commandContext is command, stopped when ctx ends: its process group is
// killed, or the launcher is asked to stop it (stop).
func (l *Local) commandContext(ctx context.Context, argv ...string) *exec.Cmd {
	argv = append(append([]string(nil), l.launcher...), argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error {
		if l.stop != nil {
			return l.stop(cmd)
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return cmd
}

// AgentOutput implements Runner: it runs this gorun (the binary NewLocal
// was given) with args as a child, in a process group of its own that is
// SIGKILLed as a whole when ctx ends, and that dies with this process
// (Pdeathsig). Only the last wire.StderrTail bytes of its stderr are kept, for
// the error.
func (l *Local) AgentOutput(ctx context.Context, args ...string) ([]byte, error) {
	if out, err, ok := l.warm.ask(ctx, l.node, args); ok {
		return out, err
	}
	argv := append([]string{l.agentBinary}, args...)
	cmd := l.commandContext(ctx, argv...)
	cmd.Env = l.agentEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = wire.OutputWaitDelay
	var stdout bytes.Buffer
	stderr := &wire.Tail{Max: wire.StderrTail}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	quoted := shell.QuoteArgv(argv)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return stdout.Bytes(), fmt.Errorf("%s: run %s: %w", l.node, quoted, ctxErr)
	}
	tail := strings.TrimSpace(stderr.String())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			msg := fmt.Sprintf("%s: run %s: killed by %s", l.node, quoted, unix.SignalName(ws.Signal()))
			if tail != "" {
				msg += ": " + tail
			}
			return stdout.Bytes(), errors.New(msg)
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w", l.node, &ExitError{Cmd: quoted, Code: ee.ExitCode(), Stderr: tail})
	}
	return stdout.Bytes(), fmt.Errorf("%s: run %s: %w", l.node, quoted, err)
}

// Output implements Runner. The command runs in its own process group,
// which is killed when ctx is cancelled or when this process dies.
func (l *Local) Output(ctx context.Context, argv []string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: run: empty command", l.node)
	}
	cmd := l.commandContext(ctx, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = outputWaitDelay
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return out, fmt.Errorf("%s: run %s: %w: %s", l.node, argv[0], err, msg)
		}
		return out, fmt.Errorf("%s: run %s: %w", l.node, argv[0], err)
	}
	return out, nil
}

// Start implements Runner. The agent is put in a process group of its own,
// so a Ctrl-C at the terminal reaches the head only, which then decides how
// to stop the job. It deliberately has no parent-death signal: when the
// head dies, the agent sees EOF on stdin and tears the job down itself.
// ctx bounds starting only; it does not stop a started job (use Stop).
func (l *Local) Start(ctx context.Context, job wire.Job, stdout, stderr io.Writer) (Process, error) {
	if p := l.warm.take(job, stdout, stderr); p != nil {
		return p, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: start agent: %w", l.node, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("%s: start agent: %w", l.node, ErrClosed)
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%s: start agent: %w", l.node, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("%s: start agent: %w", l.node, err)
	}
	cmd := l.command(l.agentBinary, wire.AgentCommand)
	cmd.Env = l.agentEnv
	cmd.Stdout, cmd.Stderr = outW, errW
	if job.Stdin != nil {
		cmd.ExtraFiles = []*os.File{job.Stdin} // wire.JobStdinFD
		job.HasStdin = true
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	// The agent holds its own copies of the write ends.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if stdin != nil {
			stdin.Close()
		}
		return nil, fmt.Errorf("%s: start agent: %w", l.node, err)
	}

	var self *agentProcess
	wait := func() (int, error) {
		err := cmd.Wait()
		l.mu.Lock()
		delete(l.procs, self)
		l.mu.Unlock()
		return agentExit(l.node, err)
	}
	// wait takes l.mu, which Start holds, so it cannot deregister before
	// the process is registered below.
	p, err := attachAgent(job, stdin, outR, errR, stdout, stderr, wait)
	if err != nil {
		return nil, fmt.Errorf("%s: start agent: %w", l.node, err)
	}
	self = p.(*agentProcess)
	l.procs[self] = struct{}{}
	return p, nil
}

// Warm implements Warmer.
func (l *Local) Warm(ctx context.Context, job wire.Job) error { return l.warm.warm(ctx, job, l.Start) }

// Cool stops the agent on standby, if any (Warmer).
func (l *Local) Cool() { l.warm.coolDown() }

// HandAhead implements AheadHander.
func (l *Local) HandAhead(job wire.Job) bool { return l.warm.handAhead(job) }

var _ Warmer = (*Local)(nil)

// agentExit turns the agent's wait result into Process.Wait's.
func agentExit(node string, err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1, fmt.Errorf("%s: agent killed by %v", node, ws.Signal())
		}
		return ee.ExitCode(), nil
	}
	return -1, fmt.Errorf("%s: wait for agent: %w", node, err)
}

// Close implements Runner: it stops every job started through l, gracefully,
// and waits until they are gone.
func (l *Local) Close() error {
	l.mu.Lock()
	l.closed = true
	procs := make([]*agentProcess, 0, len(l.procs))
	for p := range l.procs {
		procs = append(procs, p)
	}
	l.mu.Unlock()
	for _, p := range procs {
		p.Stop(false)
	}
	for _, p := range procs {
		_, _ = p.Wait()
	}
	return nil
}
