package sshexec

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gorun/gorun/internal/wire"
)

// TestAskStreamHandsOverAtAFrameBoundary: an answer is taken out of a
// standby's stream wherever the bytes split it, other frames are held,
// and a hand-over in the middle of a frame gives the job's reader whole
// frames, in order; a waiter still waiting then hears there is no answer.
func TestAskStreamHandsOverAtAFrameBoundary(t *testing.T) {
	s := newAskStream()
	if _, _, ok := s.expect(); ok {
		t.Fatal("expect accepted before the agent said it reads asks")
	}
	ready, _ := json.Marshal(wire.AskAnswer{ID: wire.AskReady})
	s.Write(wire.AppendFrame(nil, wire.FrameAnswer, ready))
	id, c, ok := s.expect()
	if !ok {
		t.Fatal("expect refused before the hand-over")
	}
	_, late, _ := s.expect()
	ans, _ := json.Marshal(wire.AskAnswer{ID: id, Stdout: []byte("facts"), Code: 0})
	var stream []byte
	stream = wire.AppendFrame(stream, wire.FrameStderr, []byte("a warning at import\n"))
	stream = wire.AppendFrame(stream, wire.FrameAnswer, ans)
	stream = wire.AppendFrame(stream, wire.FrameStdout, []byte("first line\n"))
	split := len(stream) - 4        // inside the last frame
	for i := 0; i < split; i += 3 { // in pieces that cut every frame
		s.Write(stream[i:min(i+3, split)])
	}
	select {
	case got := <-c:
		if string(got.Stdout) != "facts" {
			t.Errorf("answer %+v", got)
		}
	default:
		t.Fatal("the answer was not taken out")
	}
	var job bytes.Buffer
	s.set(&job)
	s.Write(stream[split:])
	var kinds []byte
	var text bytes.Buffer
	d := wire.NewFrameDecoder(func(kind byte, p []byte) { kinds = append(kinds, kind); text.Write(p) })
	d.Write(job.Bytes())
	if left := len(d.Pending()); string(kinds) != string([]byte{wire.FrameStderr, wire.FrameStdout}) || text.String() != "a warning at import\nfirst line\n" || left != 0 {
		t.Errorf("the job's stream: kinds %q, text %q, %d bytes left over", kinds, text.String(), left)
	}
	if _, got := <-late; got {
		t.Error("a waiter after the hand-over got an answer")
	}
	if _, _, ok := s.expect(); ok {
		t.Error("expect accepted after the hand-over")
	}
}
