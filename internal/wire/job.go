package wire

import (
	"encoding/json"
	"os"
	"time"
)

// What the head hands the node agent: one job line (a Job as JSON), and
// for a pooled job the pool it asks for; and what a worker's supervisor
// and the agent say on the pool's socket.

// Job is a command to run on a node under the agent. Env is the complete
// set of variables to add to (or override in) the agent's environment; it
// travels inside the job spec, never through sshd's Setenv.
type Job struct {
	// Protocol is the head's Protocol, set by the head as it sends
	// the job; an agent of another version refuses the job.
	Protocol int               `json:"protocol"`
	Argv     []string          `json:"argv"`
	Env      map[string]string `json:"env"`
	Dir      string            `json:"dir"` // working directory; "" keeps the agent's
	// Heartbeat is how long the agent waits for a sign of life from the head
	// before it tears the job down; 0 uses DefaultHeartbeatTimeout.
	Heartbeat time.Duration `json:"heartbeat"`
	// Grace is how long a stop the head asks for (sshexec.Process.Stop), or one
	// for the head's loss, waits between the workers' SIGTERM and SIGKILL;
	// 0 uses DefaultGrace.
	Grace time.Duration `json:"grace"`
	// StopGrace is the grace of a stop from outside that reaches the agent
	// itself as a signal (Slurm signalling the step); 0 uses Grace.
	StopGrace time.Duration `json:"stop_grace,omitempty"`
	// PassSignals are the signals the head passes on (sshexec.Process.Signal):
	// the agent and the job's main process ignore them, so that one sent
	// to every process of the job at once kills neither; the workers'
	// supervisors catch them.
	PassSignals []int `json:"pass_signals,omitempty"`
	// Relay makes the agent's stdout a stream of frames (AppendFrame): the
	// job's own stdout and stderr as FrameStdout and FrameStderr, and
	// whatever frames the job's descendants send on the unix socket named
	// by RelaySocketVar in their environment, each passed on whole, in the
	// order it arrived. sshexec.Process.Tell reaches those descendants.
	Relay bool `json:"relay,omitempty"`
	// RelayEnd, when set, is the frame kind with which a relay client says
	// its last word: one that hangs up without it is reported as
	// FrameLost.
	RelayEnd byte `json:"relay_end,omitempty"`
	// Sidecar, when set on a relayed job, is handed to the agent's sidecar
	// (agent.ServeAgentWith) as it is; gorun's transport does not read it. gorun puts its
	// GPU telemetry settings here.
	Sidecar json.RawMessage `json:"sidecar,omitempty"`
	// Preimport, for a Python job, names the modules its interpreter
	// imports before the job is handed to it, when the job starts warm
	// (sshexec.Warmer). Without it a job always starts cold.
	Preimport []string `json:"preimport,omitempty"`
	// Standby marks a job line sent by sshexec.Warmer.Warm: the agent starts the
	// job's interpreter now and waits for the job itself (internal/agent's standby.go).
	Standby bool `json:"standby,omitempty"`
	// Gated, for a relayed job handed ahead to an agent on standby
	// (sshexec.AheadHander), holds its workers: each worker's supervisor waits at
	// its start, with everything but the worker itself done, until the
	// head releases the job (the next Start on the runner, with the same
	// job) or stops it. GateVar tells the supervisors.
	Gated bool `json:"gated,omitempty"`
	// WaitFor, for a job that starts warm, is the address ("host:port") of
	// a server that the job's program connects to as it starts and that
	// another node's job opens: torchrun's rendezvous store on node 0. The
	// warm program waits until the address accepts a connection (polling
	// every few milliseconds, up to WaitForLimit) and only then runs, so
	// that its own first connect succeeds instead of waiting out the
	// client's retry delay (one second in torch's TCPStore).
	WaitFor string `json:"wait_for,omitempty"`
	// AskAhead, for a job started on standby (Standby), names gorun
	// subcommands the head is to ask of the agent there (AgentOutput with
	// that subcommand and one argument): each is started ahead as
	// `gorun CMD -`, which loads what it needs first (NVML, for the GPU
	// teardown check) and then reads its argument from stdin, so that an
	// ask costs no process start and no load. Each serves one ask; those
	// not asked end when the job comes.
	AskAhead []string `json:"ask_ahead,omitempty"`
	// Pool, for a relayed job, asks for its workers' interpreters to be
	// started beside it (internal/agent's pool.go).
	Pool *Pool `json:"pool,omitempty"`
	// Stdin, for a job started through Local, is the job's stdin (the
	// head's own, for the workers to read); nil: /dev/null. It reaches
	// the agent as its fd 3 (JobStdinFD), which HasStdin says.
	Stdin    *os.File `json:"-"`
	HasStdin bool     `json:"stdin,omitempty"`
}

// Defaults for Job.
const (
	DefaultHeartbeatTimeout = 6 * time.Second
	DefaultGrace            = 3 * time.Second
)

// JobStdinFD is the agent's file descriptor of the job's stdin when
// Job.HasStdin.
const JobStdinFD = 3

// WaitForLimit bounds a warm program's wait for Job.WaitFor's address:
// after it the program runs anyway, and its own connect retries.
const WaitForLimit = 10 * time.Second

// Pool asks the agent of a relayed job for interpreters started ahead.
type Pool struct {
	// Modules are imported by every interpreter before it waits.
	Modules []string `json:"modules"`
	// Slots are the interpreters, one per worker (slot i for local rank
	// i).
	Slots []PoolSlot `json:"slots"`
	// Late names the variables the job's main process sets for each
	// worker after the pool has started, which neither Python nor the
	// modules read at import (torchrun's TORCHELASTIC_RESTART_COUNT); a
	// name ending in '*' stands for every name it begins. A difference
	// in any other import-time variable keeps the worker out of the pool.
	Late []string `json:"late,omitempty"`
	// Auto (--prewarm auto): no interpreter starts on a node with fewer
	// CPUs than the pool's imports (one per fork server) and torchrun's,
	// nor, for the next attempt's pool (Beside), where the CPUs the
	// running attempt leaves idle cannot hold its imports (internal/agent's autoPoolOff):
	// there the imports would only slow the rest; every worker there is
	// told why and starts cold.
	Auto bool `json:"auto,omitempty"`
	// Beside is how many workers run while the pool imports: none for a
	// launch's pool, the attempt's for the next attempt's, started while
	// it runs.
	Beside int `json:"beside,omitempty"`
	// Worker is what each worker runs, as its supervisor gets it: the
	// script (or, with Module, the module) and its arguments. The fork
	// server reads the script before its imports, and a worker whose
	// script does what a pooled interpreter would not see (sets a
	// variable read at import, changes sys.path, ... before it imports
	// the modules) starts cold and says why (warm.py _scan). Its room to
	// show the worker's command line (internal/agent's poolRoom) fits these arguments.
	Worker []string `json:"worker,omitempty"`
	Module bool     `json:"module,omitempty"`
	// Wait bounds how long a worker's supervisor waits for its
	// interpreter while the pool is still importing (0: internal/agent's poolWait); then
	// the worker starts cold, as a process of its own that a hang check
	// can name and dump, and the slot goes.
	Wait time.Duration `json:"wait_ns,omitempty"`
}

// PoolSlot is one interpreter of a pool.
type PoolSlot struct {
	// Env is set in the interpreter's environment, on top of the job's.
	Env map[string]string `json:"env,omitempty"`
	// Default is set unless the job's environment has the name already
	// (the variables the job's main process sets only when unset).
	Default map[string]string `json:"default,omitempty"`
	// CPUs binds the interpreter, before its imports; none: unbound.
	CPUs []int `json:"cpus,omitempty"`
}

// PoolTake is what a worker's supervisor asks of the pool: the worker as
// it would start it.
type PoolTake struct {
	Slot   int      `json:"slot"`
	Interp string   `json:"interp"` // the interpreter, as a path
	Module bool     `json:"module"` // Target is a module (-m)
	Target string   `json:"target"` // the script or the module
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"` // absolute
	CPUs   []int    `json:"cpus,omitempty"`
}

// PoolReply is the agent's answer to a PoolTake, and later its word on
// the worker's end.
type PoolReply struct {
	PID  int    `json:"pid,omitempty"`
	Cold string `json:"cold,omitempty"` // why the worker cannot be pooled
	// Stopped is the stop's signal when the job was stopped before the
	// worker started: it is not to start at all.
	Stopped int  `json:"stopped,omitempty"`
	Status  *int `json:"status,omitempty"` // the worker's raw wait status, once reaped
}
