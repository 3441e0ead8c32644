package sshexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/wire"
)

// Commands through an agent on standby: between two attempts the head
// asks every node something (the recheck's `gorun _collect`, the GPU
// teardown check), and each node already runs the next attempt's agent
// on standby. Asking that agent costs one fork on the node; a session of
// its own costs sshd's session setup (about 150 ms an idle node, several
// times that on a loaded one), and under Slurm a job step (srun) of its
// own. Runner.AgentOutput goes through the standby when there is one, and
// through a session of its own otherwise.

// An answer with ID 0 asks nothing: the agent on standby sends it once,
// as it begins to wait, to say that it reads asks. Until it came the head
// asks through a session of its own: an agent not yet running (a Slurm
// step still waiting for its resources) would answer late or never.
const askReady = 0

// sayReady tells the head that the agent on standby answers asks now.
func (a *agent) sayReady() {
	if a.relay != nil {
		b, _ := json.Marshal(askAnswer{ID: askReady})
		a.relay.write(wire.AppendFrame(nil, wire.FrameAnswer, b))
	}
}

type askRequest struct {
	ID   uint64   `json:"id"`
	Args []string `json:"args"`
}

type askAnswer struct {
	ID     uint64 `json:"id"`
	Stdout []byte `json:"stdout"`
	// Code is the exit code (-1: it did not start, or died by a signal);
	// Err says what went wrong, with the end of its stderr.
	Code int    `json:"code"`
	Err  string `json:"err,omitempty"`
	// TooLarge: the output does not fit in a frame; the head asks again
	// through a session of its own.
	TooLarge bool `json:"too_large,omitempty"`
}

// askLimit bounds one asked command on the node, whatever the head waits.
const askLimit = 2 * time.Minute

// answer runs the asked gorun subcommand and sends its answer on the
// relay.
func (a *agent) answer(ctx context.Context, line []byte) {
	var req askRequest
	if err := json.Unmarshal(line, &req); err != nil || len(req.Args) == 0 || a.relay == nil {
		a.logf("bad ask: %v", err)
		return
	}
	ans := askAnswer{ID: req.ID, Code: -1}
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
		b, _ = json.Marshal(askAnswer{ID: req.ID, Code: -1, TooLarge: true})
	}
	a.relay.write(wire.AppendFrame(nil, wire.FrameAnswer, b))
}

// asks are the agent's children started for asks, by pid: whoever reaps
// one, its own wait or the agent's reaper (which reaps every child), hands
// its status here.
type asks struct {
	mu    sync.Mutex
	byPID map[int]chan unix.WaitStatus
	ahead map[string]*askChild // started ahead (Job.AskAhead), by subcommand, until asked
}

// askChild is a gorun started for an ask.
type askChild struct {
	child  *startedJob
	done   chan unix.WaitStatus
	stdout *bytes.Buffer
	stderr *tailWriter
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
	c := &askChild{stdout: &bytes.Buffer{}, stderr: &tailWriter{max: stderrTail}, done: make(chan unix.WaitStatus, 1)}
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

// startAhead starts `gorun CMD -` for each subcommand (Job.AskAhead), to
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
	case <-time.After(agentOutputWaitDelay):
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

// askStream is a standby's stdout on the head's side, until the job is
// handed over: frames in, answers taken out, every other frame held for
// the job's stream (at most maxHeld bytes; a warm interpreter prints
// nothing, so this is only a guard). set hands the stream over at a frame
// boundary: what was held, then the partial frame under way, then
// everything after, goes to w as it came.
type askStream struct {
	mu      sync.Mutex
	ready   bool // the agent said it reads asks (askReady)
	w       io.Writer
	held    bytes.Buffer
	dec     *wire.FrameDecoder
	nextID  uint64
	waiting map[uint64]chan askAnswer
}

func newAskStream() *askStream {
	s := &askStream{waiting: map[uint64]chan askAnswer{}}
	s.dec = wire.NewFrameDecoder(func(kind byte, p []byte) {
		if kind == wire.FrameAnswer {
			var ans askAnswer
			if json.Unmarshal(p, &ans) == nil {
				if ans.ID == askReady {
					s.ready = true
				} else if c := s.waiting[ans.ID]; c != nil {
					c <- ans // buffered; one answer per id
					delete(s.waiting, ans.ID)
				}
			}
			return
		}
		if s.held.Len()+wire.FrameHeader+len(p) <= maxHeld {
			s.held.Write(wire.AppendFrame(nil, kind, p))
		}
	})
	return s
}

func (s *askStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		return s.w.Write(p)
	}
	return s.dec.Write(p)
}

// set passes what was held, then everything after, to w; asks still
// waiting get no answer (their callers go another way).
func (s *askStream) set(w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = w.Write(s.held.Bytes())
	_, _ = w.Write(s.dec.Pending()) // the start of a frame still coming
	s.held = bytes.Buffer{}
	s.w = w
	for id, c := range s.waiting {
		close(c)
		delete(s.waiting, id)
	}
}

// expect registers an ask and returns its id and the channel its answer
// comes on (closed without one when the stream is handed over); false
// before the agent said it reads asks, and once the stream was handed
// over.
func (s *askStream) expect() (uint64, chan askAnswer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil || !s.ready {
		return 0, nil, false
	}
	s.nextID++
	c := make(chan askAnswer, 1)
	s.waiting[s.nextID] = c
	return s.nextID, c, true
}

func (s *askStream) forget(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, id)
}

// ask runs this gorun with args through the agent on standby and returns
// its stdout, as AgentOutput would; ok is false when there is no standby
// to ask (none, not yet reading asks, gone, handed its job, or its control
// queue full), and the caller goes through a session of its own.
func (s *warmSlot) ask(ctx context.Context, node string, args []string) (out []byte, err error, ok bool) {
	s.mu.Lock()
	a := s.a
	s.mu.Unlock()
	if a == nil || a.ask == nil {
		return nil, nil, false
	}
	ap := a.proc.(agentOf).agent()
	id, c, ok := a.ask.expect()
	if !ok {
		return nil, nil, false
	}
	line, _ := json.Marshal(askRequest{ID: id, Args: args}) // strings: cannot fail
	if !ap.ctl.askLine(line) {
		a.ask.forget(id)
		return nil, nil, false
	}
	select {
	case ans, got := <-c:
		if !got || ans.TooLarge {
			return nil, nil, false // handed its job meanwhile, or too much to say in a frame
		}
		if ans.Err != "" {
			return ans.Stdout, fmt.Errorf("node %s: run %s (through the agent on standby): %s", node,
				shell.QuoteArgv(append([]string{"gorun"}, args...)), ans.Err), true
		}
		return ans.Stdout, nil, true
	case <-ap.done:
		a.ask.forget(id)
		return nil, nil, false
	case <-ctx.Done():
		a.ask.forget(id)
		return nil, fmt.Errorf("node %s: run gorun %s: %w", node, strings.Join(args, " "), ctx.Err()), true
	}
}
