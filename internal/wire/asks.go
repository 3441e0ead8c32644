package wire

import "time"

// Asks through an agent on standby (CtlAsk): the head's request and the
// agent's answer (FrameAnswer).

// AskReady is the ID of an answer that asks nothing: the agent on standby sends it once,
// as it begins to wait, to say that it reads asks. Until it came the head
// asks through a session of its own: an agent not yet running (a Slurm
// step still waiting for its resources) would answer late or never.
const AskReady = 0

// AskRequest is what the head asks of an agent on standby: gorun run there
// with Args.
type AskRequest struct {
	ID   uint64   `json:"id"`
	Args []string `json:"args"`
}

// AskAnswer is an agent's answer to an AskRequest of the same ID.
type AskAnswer struct {
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

// StderrTail is how much of a failed command's stderr goes into its error
// (Tail.Max).
const StderrTail = 2048

// OutputWaitDelay bounds how long a run for its output (sshexec's
// AgentOutput, an ask through an agent on standby) waits for the output
// pipes once its child exited or was killed, in case something the child
// started outside its process group still holds them.
const OutputWaitDelay = 500 * time.Millisecond

// Tail keeps the last Max bytes written to it: the end of a command's
// stderr, for its error (AskAnswer.Err, and the head's own runs).
type Tail struct {
	Max       int
	buf       []byte
	truncated bool
}

// Write implements io.Writer.
func (w *Tail) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.Max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
		w.truncated = true
	}
	return len(p), nil
}

// String is what was kept, with a leading "…" when some was dropped.
func (w *Tail) String() string {
	if w.truncated {
		return "…" + string(w.buf)
	}
	return string(w.buf)
}
