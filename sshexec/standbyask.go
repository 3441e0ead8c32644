package sshexec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/wire"
)

// The head's side of the asks through an agent on standby (the agent's is
// internal/agent's standbyask.go): between two attempts the head asks
// every node something, and an agent on standby answers it with one fork
// on the node instead of a session of its own (wire.CtlAsk,
// wire.FrameAnswer). Runner.AgentOutput goes through the standby when
// there is one, and through a session of its own otherwise.

// askStream is a standby's stdout on the head's side, until the job is
// handed over: frames in, answers taken out, every other frame held for
// the job's stream (at most maxHeld bytes; a warm interpreter prints
// nothing, so this is only a guard). set hands the stream over at a frame
// boundary: what was held, then the partial frame under way, then
// everything after, goes to w as it came.
type askStream struct {
	mu      sync.Mutex
	ready   bool // the agent said it reads asks (wire.AskReady)
	w       io.Writer
	held    bytes.Buffer
	dec     *wire.FrameDecoder
	nextID  uint64
	waiting map[uint64]chan wire.AskAnswer
}

func newAskStream() *askStream {
	s := &askStream{waiting: map[uint64]chan wire.AskAnswer{}}
	s.dec = wire.NewFrameDecoder(func(kind byte, p []byte) {
		if kind == wire.FrameAnswer {
			var ans wire.AskAnswer
			if json.Unmarshal(p, &ans) == nil {
				if ans.ID == wire.AskReady {
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
func (s *askStream) expect() (uint64, chan wire.AskAnswer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil || !s.ready {
		return 0, nil, false
	}
	s.nextID++
	c := make(chan wire.AskAnswer, 1)
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
	line, _ := json.Marshal(wire.AskRequest{ID: id, Args: args}) // strings: cannot fail
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
