package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Frames a worker's supervisor sends on the node agent's relay socket.
// Output and progress frames start with the local rank as a big-endian
// uint32 (AppendRank, SplitRank); started and exit frames are JSON
// (WorkerStarted, WorkerExit).
const (
	FrameStarted    byte = 'S' // WorkerStarted
	FrameExit       byte = 'X' // WorkerExit
	FrameOut        byte = 'o' // local rank, then bytes of the worker's stdout
	FrameErr        byte = 'e' // local rank, then bytes of its stderr
	FrameProgress   byte = 'p' // local rank: $GORUN_HEARTBEAT_FILE was touched
	FrameCheckpoint byte = 'c' // local rank, then how long ago $GORUN_CHECKPOINT_FILE was touched or a checkpoint line written, in ns as text (progress too)
	FrameStep       byte = 's' // local rank, then "N AGE": the worker's output reported step N, AGE ns ago (StepsVar)
	FrameInit       byte = 'i' // local rank: the worker joined the rendezvous store
	FrameDumped     byte = 'd' // local rank: a requested stack dump is written
	FrameRASDone    byte = 'r' // local rank: NCCL's RAS report is written (or there is none)
	// FrameStacks: local rank, then a JSON pystack.Dump: the stacks a
	// dump asked for (TellDump), with source lines read on the node; it
	// comes before that worker's FrameDumped or FrameExit.
	FrameStacks byte = 'k'
)

// What the head sends, through every agent, to every worker's supervisor:
// one byte each.
const (
	TellDump byte = 'D' // send the worker's Python stacks now (FrameStacks)
	TellRAS  byte = 'R' // the RAS reporter: print NCCL's RAS report now
	// TellResize, followed by "COLSxROWS;" (a Tell each byte: digits, 'x'
	// and ';' are no request of their own), gives the head terminal's new
	// size to the workers' pseudo-terminals (TTYVar).
	TellResize byte = 'W'
)

// RASWait is how long the head waits, after TellRAS, for FrameRASDone
// before it asks for stacks anyway; the reporter gives NCCL a little less
// than that, so its answer arrives in time. NCCL itself waits up to 5 s,
// and once more, for the other processes.
const RASWait = 12 * time.Second

// TTY is what TTYVar says.
type TTY struct {
	Cols, Rows int
	Out, Err   bool // stdout, stderr on a pseudo-terminal
}

// FormatTTY writes t as TTYVar's value; "" when no stream is a terminal.
func FormatTTY(t TTY) string {
	var streams []string
	if t.Out {
		streams = append(streams, "out")
	}
	if t.Err {
		streams = append(streams, "err")
	}
	if len(streams) == 0 {
		return ""
	}
	return fmt.Sprintf("%dx%d:%s", t.Cols, t.Rows, strings.Join(streams, ","))
}

// ResizeTells is the bytes of a TellResize to the size of t.
func ResizeTells(t TTY) []byte {
	return fmt.Appendf([]byte{TellResize}, "%dx%d;", t.Cols, t.Rows)
}

// ParseSize reads "COLSxROWS" (TTYVar's size, a TellResize's); false
// unless both are positive numbers.
func ParseSize(s string) (cols, rows int, ok bool) {
	c, r, found := strings.Cut(s, "x")
	cols, err1 := strconv.Atoi(c)
	rows, err2 := strconv.Atoi(r)
	if !found || err1 != nil || err2 != nil || cols <= 0 || rows <= 0 {
		return 0, 0, false
	}
	return cols, rows, true
}

// ParseTTY reads TTYVar's value; the zero TTY (no terminal) when it is
// empty or malformed.
func ParseTTY(s string) TTY {
	size, streams, ok := strings.Cut(s, ":")
	if !ok || !strings.Contains(size, "x") {
		return TTY{}
	}
	var t TTY
	t.Cols, t.Rows, _ = ParseSize(size) // 0x0: a terminal that does not say its size
	for _, st := range strings.Split(streams, ",") {
		t.Out = t.Out || st == "out"
		t.Err = t.Err || st == "err"
	}
	return t
}

// WorkerStarted says a worker runs.
type WorkerStarted struct {
	Rank      int `json:"rank"`
	LocalRank int `json:"local_rank"`
	WorldSize int `json:"world_size"`
	PID       int `json:"pid"`
	// Supervisor is the pid of the worker's supervisor (gorun _rank),
	// the process torchrun started.
	Supervisor int   `json:"supervisor_pid,omitempty"`
	Time       int64 `json:"time_ns"` // node clock, Unix nanoseconds
	// Host is the node's hostname, as the worker's gethostname says it.
	Host string `json:"host,omitempty"`
	// RASReporter is set on the one worker (local rank 0 of node 0) that
	// asks NCCL's RAS for progress and, in a hang, for its report.
	RASReporter bool `json:"ras_reporter,omitempty"`
	// Pooled: the worker runs in an interpreter of the node's pool,
	// its imports done ahead (Job.Pool).
	Pooled bool `json:"pooled,omitempty"`
	// Cold says why a worker that could have been pooled started an
	// interpreter of its own.
	Cold string `json:"cold,omitempty"`
}

// WorkerExit says how a worker ended.
type WorkerExit struct {
	Rank      int `json:"rank"`
	LocalRank int `json:"local_rank"`
	Code      int `json:"code"`   // exit status; -1 when killed by a signal
	Signal    int `json:"signal"` // the signal that killed it, 0 if none
	// Stopped is set when the worker was told to stop (a signal from
	// torchrun or gorun reached its supervisor, or a stack dump was asked
	// for) before it ended: its end is a consequence, never the cause.
	Stopped bool  `json:"stopped"`
	Time    int64 `json:"time_ns"`
	// SupervisorLost: the worker's supervisor hung up without this report
	// (it was killed), and the worker died with it (its parent-death
	// signal, SIGKILL); the agent said so (FrameLost).
	SupervisorLost bool `json:"supervisor_lost,omitempty"`
}

// Failed reports whether the worker ended badly.
func (e WorkerExit) Failed() bool { return e.Code != 0 || e.Signal != 0 }

// ShellCode is the exit status a shell reports: the code, or 128+signal.
func (e WorkerExit) ShellCode() int {
	if e.Signal != 0 {
		return 128 + e.Signal
	}
	return e.Code
}

// AppendRank appends the local rank that starts an output or progress
// payload to dst.
func AppendRank(dst []byte, localRank int) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(localRank))
}

// SplitRank takes the local rank off an output or progress payload.
func SplitRank(p []byte) (int, []byte, error) {
	if len(p) < 4 {
		return 0, nil, errors.New("short worker frame")
	}
	return int(binary.BigEndian.Uint32(p)), p[4:], nil
}

// JSON is the payload of a started or exit frame.
func JSON(v any) []byte {
	b, _ := json.Marshal(v) // plain structs: cannot fail
	return b
}
