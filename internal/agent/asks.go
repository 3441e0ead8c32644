package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/wire"
)

// Commands through an agent on standby: between two attempts the head
// asks every node something (the recheck's `gorun _collect`, the GPU
// teardown check), and each node already runs the next attempt's agent
// on standby. Asking that agent costs one fork on the node; a session of
// its own costs sshd's session setup (about 150 ms an idle node, several
// times that on a loaded one), and under Slurm a job step (srun) of its
// own. sshexec.Runner.AgentOutput goes through the standby when there is one, and
// through a session of its own otherwise.

// sayReady tells the head that the agent on standby answers asks now.
func (a *agent) sayReady() {
	if a.relay != nil {
		b, _ := json.Marshal(wire.AskAnswer{ID: wire.AskReady})
		a.relay.write(wire.AppendFrame(nil, wire.FrameAnswer, b))
	}
}

// askLimit bounds one asked command on the node, whatever the head waits.
const askLimit = 2 * time.Minute

// answer runs the asked gorun subcommand and sends its answer on the
// relay.
func (a *agent) answer(ctx context.Context, line []byte) {
	var req wire.AskRequest
	if err := json.Unmarshal(line, &req); err != nil || len(req.Args) == 0 || a.relay == nil {
		a.logf("bad ask: %v", err)
		return
	}
	ans := wire.AskAnswer{ID: req.ID, Code: -1}
	out, tail, ws, err := a.asks.run(ctx, req.Args)
	ans.Stdout = out
	switch {
	case err != nil:
		ans.Err = err.Error()
	case !ws.Exited():
		ans.Err = "killed by " + ws.Signal().String()
	case ws.ExitStatus() != 0:
		ans.Code, ans.Err = ws.ExitStatus(), fmt.Sprintf("exit status %d", ws.ExitStatus())
	default:
		ans.Code = 0
	}
	if ans.Err != "" && tail != "" {
		ans.Err += ": " + tail
	}
	b, _ := json.Marshal(ans)
	if len(b) > wire.MaxFrame {
		b, _ = json.Marshal(wire.AskAnswer{ID: req.ID, Code: -1, TooLarge: true})
	}
	a.relay.write(wire.AppendFrame(nil, wire.FrameAnswer, b))
}

// asks are the agent's children started for asks, by pid: whoever reaps
// one, its own wait or the agent's reaper (which reaps every child), hands
// its status here.
type asks struct {
	mu    sync.Mutex
	byPID map[int]chan unix.WaitStatus
	ahead map[string]*askChild // started ahead (wire.Job.AskAhead), by subcommand, until asked
}

// askChild is a gorun started for an ask.
type askChild struct {
	child  *startedJob
	done   chan unix.WaitStatus
	stdout *bytes.Buffer
	stderr *wire.Tail
	stdin  *os.File // its stdin's write end, for a child started ahead; nil otherwise
}

// start starts this gorun with args, in a session of its own, dying with
// the agent (Pdeathsig); with stdin, its stdin is a pipe whose write end
// the child's stdin field holds.
func (s *asks) start(args []string, stdin bool) (*askChild, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &askChild{stdout: &bytes.Buffer{}, stderr: &wire.Tail{Max: wire.StderrTail}, done: make(chan unix.WaitStatus, 1)}
	var in *os.File
	if stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		in, c.stdin = r, w
	}
	s.mu.Lock() // the reaper may not hand over the child before it is listed
	c.child, err = forkExec(self, append([]string{self}, args...), os.Environ(), "", in, c.stdout, c.stderr)
	if err != nil {
		s.mu.Unlock()
		if c.stdin != nil {
			c.stdin.Close()
		}
		return nil, err
	}
	if s.byPID == nil {
		s.byPID = map[int]chan unix.WaitStatus{}
	}
	s.byPID[c.child.pid] = c.done
	s.mu.Unlock()
	go func() {
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(c.child.pid, &ws, unix.WALL, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err == nil {
				s.reaped(c.child.pid, ws)
			}
			return // ECHILD: the agent's reaper has it
		}
	}()
	return c, nil
}

// startAhead starts `gorun CMD -` for each subcommand (wire.Job.AskAhead), to
// take its argument on stdin when asked. One that fails to start is
// started when asked, as any other.
func (s *asks) startAhead(cmds []string) {
	for _, cmd := range cmds {
		c, err := s.start([]string{cmd, "-"}, true)
		if err != nil {
			continue
		}
		s.mu.Lock()
		if s.ahead == nil {
			s.ahead = map[string]*askChild{}
		}
		if old := s.ahead[cmd]; old != nil {
			old.stdin.Close()
		}
		s.ahead[cmd] = c
		s.mu.Unlock()
	}
}

// endAhead closes the stdin of every child started ahead and not asked:
// each ends, having no argument.
func (s *asks) endAhead() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for cmd, c := range s.ahead {
		c.stdin.Close()
		delete(s.ahead, cmd)
	}
}

// takeAhead hands args to the child started ahead for args[0], if there
// is one: its argument on its stdin, which is then closed.
func (s *asks) takeAhead(args []string) *askChild {
	if len(args) != 2 {
		return nil
	}
	s.mu.Lock()
	c := s.ahead[args[0]]
	delete(s.ahead, args[0])
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	_, err := c.stdin.Write([]byte(args[1] + "\n"))
	c.stdin.Close()
	if err != nil { // it ended before the ask: start one afresh
		return nil
	}
	return c
}

// run runs this gorun with args (through the child started ahead for
// args[0], if any), for at most askLimit or until ctx ends, and returns
// its stdout, the end of its stderr and how it ended.
func (s *asks) run(ctx context.Context, args []string) ([]byte, string, unix.WaitStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, askLimit)
	defer cancel()
	c := s.takeAhead(args)
	if c == nil {
		var err error
		if c, err = s.start(args, false); err != nil {
			return nil, "", 0, err
		}
	}
	child := c.child
	var ws unix.WaitStatus
	select {
	case ws = <-c.done:
	case <-ctx.Done():
		_ = unix.Kill(-child.pid, unix.SIGKILL)
		ws = <-c.done
	}
	// The pipes close once nothing holds them: a grandchild left holding
	// them is killed with the child's session after a moment.
	copied := make(chan struct{})
	go func() { child.wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(wire.OutputWaitDelay):
		_ = unix.Kill(-child.pid, unix.SIGKILL)
		<-copied
	}
	return c.stdout.Bytes(), strings.TrimSpace(c.stderr.String()), ws, nil
}

// reaped hands a reaped child's status to its ask; false when pid is not
// an ask's.
func (s *asks) reaped(pid int, ws unix.WaitStatus) bool {
	s.mu.Lock()
	c := s.byPID[pid]
	delete(s.byPID, pid)
	s.mu.Unlock()
	if c == nil {
		return false
	}
	c <- ws
	return true
}
