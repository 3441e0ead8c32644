package launch

import (
	"encoding/binary"
	"encoding/json"
	"errors"
)

// Frames a worker's supervisor (`gorun _rank`) sends on the node agent's
// relay socket; the agent passes them to the head as they are (see
// sshexec.Job.Relay). Output and progress frames start with the local rank
// as a big-endian uint32; started and exit frames are JSON.
const (
	frameStarted  byte = 'S' // workerStarted
	frameExit     byte = 'X' // workerExit
	frameOut      byte = 'o' // local rank, then bytes of the worker's stdout
	frameErr      byte = 'e' // local rank, then bytes of its stderr
	frameProgress byte = 'p' // local rank: $GORUN_HEARTBEAT_FILE was touched
	frameInit     byte = 'i' // local rank: the worker joined the rendezvous store
	frameDumped   byte = 'd' // local rank: a requested stack dump is written
	frameRASDone  byte = 'r' // local rank: NCCL's RAS report is written (or there is none)
)

// What the head sends, through every agent, to every worker's supervisor.
const (
	tellDump byte = 'D' // print the worker's Python stacks now
	tellRAS  byte = 'R' // the RAS reporter: print NCCL's RAS report now
)

// workerStarted says a worker runs.
type workerStarted struct {
	Rank      int   `json:"rank"`
	LocalRank int   `json:"local_rank"`
	WorldSize int   `json:"world_size"`
	PID       int   `json:"pid"`
	Time      int64 `json:"time_ns"` // node clock, Unix nanoseconds
	// RASReporter is set on the one worker (local rank 0 of node 0) that
	// asks NCCL's RAS for progress and, in a hang, for its report.
	RASReporter bool `json:"ras_reporter,omitempty"`
}

// workerExit says how a worker ended.
type workerExit struct {
	Rank      int `json:"rank"`
	LocalRank int `json:"local_rank"`
	Code      int `json:"code"`   // exit status; -1 when killed by a signal
	Signal    int `json:"signal"` // the signal that killed it, 0 if none
	// Stopped is set when the worker was told to stop (a signal from
	// torchrun or gorun reached its supervisor, or a stack dump was asked
	// for) before it ended: its end is a consequence, never the cause.
	Stopped bool  `json:"stopped"`
	Time    int64 `json:"time_ns"`
}

// failed reports whether the worker ended badly.
func (e workerExit) failed() bool { return e.Code != 0 || e.Signal != 0 }

// shellCode is the exit status a shell reports: the code, or 128+signal.
func (e workerExit) shellCode() int {
	if e.Signal != 0 {
		return 128 + e.Signal
	}
	return e.Code
}

func rankFrame(dst []byte, localRank int) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(localRank))
}

// splitRank takes the local rank off an output or progress payload.
func splitRank(p []byte) (int, []byte, error) {
	if len(p) < 4 {
		return 0, nil, errors.New("short worker frame")
	}
	return int(binary.BigEndian.Uint32(p)), p[4:], nil
}

func jsonFrame(v any) []byte {
	b, _ := json.Marshal(v) // plain structs: cannot fail
	return b
}
