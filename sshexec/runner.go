package sshexec

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"syscall"
	"time"
)

// Job is a command to run on a node under the agent. Env is the complete
// set of variables to add to (or override in) the agent's environment; it
// travels inside the job spec, never through sshd's Setenv.
type Job struct {
	// Protocol is the head's wire.Protocol, set by the head as it sends
	// the job; an agent of another version refuses the job.
	Protocol int               `json:"protocol"`
	Argv     []string          `json:"argv"`
	Env      map[string]string `json:"env"`
	Dir      string            `json:"dir"` // working directory; "" keeps the agent's
	// Heartbeat is how long the agent waits for a sign of life from the head
	// before it tears the job down; 0 uses DefaultHeartbeatTimeout.
	Heartbeat time.Duration `json:"heartbeat"`
	// Grace is how long a stop the head asks for (Process.Stop), or one
	// for the head's loss, waits between the workers' SIGTERM and SIGKILL;
	// 0 uses DefaultGrace.
	Grace time.Duration `json:"grace"`
	// StopGrace is the grace of a stop from outside that reaches the agent
	// itself as a signal (Slurm signalling the step); 0 uses Grace.
	StopGrace time.Duration `json:"stop_grace,omitempty"`
	// PassSignals are the signals the head passes on (Process.Signal):
	// the agent and the job's main process ignore them, so that one sent
	// to every process of the job at once kills neither; the workers'
	// supervisors catch them.
	PassSignals []int `json:"pass_signals,omitempty"`
	// Relay makes the agent's stdout a stream of frames (wire.AppendFrame): the
	// job's own stdout and stderr as wire.FrameStdout and wire.FrameStderr, and
	// whatever frames the job's descendants send on the unix socket named
	// by wire.RelaySocketVar in their environment, each passed on whole, in the
	// order it arrived. Process.Tell reaches those descendants.
	Relay bool `json:"relay,omitempty"`
	// RelayEnd, when set, is the frame kind with which a relay client says
	// its last word: one that hangs up without it is reported as
	// wire.FrameLost.
	RelayEnd byte `json:"relay_end,omitempty"`
	// Sidecar, when set on a relayed job, is handed to the agent's sidecar
	// (ServeAgentWith) as it is; sshexec does not read it. gorun puts its
	// GPU telemetry settings here.
	Sidecar json.RawMessage `json:"sidecar,omitempty"`
	// Preimport, for a Python job, names the modules its interpreter
	// imports before the job is handed to it, when the job starts warm
	// (Warmer). Without it a job always starts cold.
	Preimport []string `json:"preimport,omitempty"`
	// Standby marks a job line sent by Warmer.Warm: the agent starts the
	// job's interpreter now and waits for the job itself (see warm.go).
	Standby bool `json:"standby,omitempty"`
	// Gated, for a relayed job handed ahead to an agent on standby
	// (AheadHander), holds its workers: each worker's supervisor waits at
	// its start, with everything but the worker itself done, until the
	// head releases the job (the next Start on the runner, with the same
	// job) or stops it. wire.GateVar tells the supervisors.
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
	// started beside it (pool.go).
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
	HeartbeatInterval       = time.Second
)

// Runner reaches one node.
type Runner interface {
	// Node names the node ("node1", or "localhost").
	Node() string
	// Output runs a short command (no agent) and returns its stdout.
	Output(ctx context.Context, argv []string) ([]byte, error)
	// Start starts job under the node agent. Its stdout and stderr are copied
	// to the given writers as they arrive; Start returns once the job runs.
	Start(ctx context.Context, job Job, stdout, stderr io.Writer) (Process, error)
	// AgentOutput runs this gorun on the node with args (a hidden subcommand
	// such as "_collect REQUEST") and returns its stdout. A run that exits
	// non-zero gives an error wrapping *ExitError, with the end of its
	// stderr; when ctx ends, the run is killed and the error wraps ctx's.
	AgentOutput(ctx context.Context, args ...string) ([]byte, error)
	// Addr is the "host:port" this runner reached the node at (the address
	// dialled, after ssh_config's HostName and Port); "" for Local.
	Addr() string
	// Close releases the connection. Processes started through it are stopped.
	Close() error
}

// Process is a job started by Runner.Start.
type Process interface {
	// Wait blocks until the job's whole process tree is gone and the output
	// has been copied, and returns its exit status. err is non-nil when the
	// node was lost (connection dropped, agent gone) rather than the job
	// exiting by itself; then code is -1.
	Wait() (code int, err error)
	// Stop asks the agent to stop the whole tree: each worker gets SIGTERM
	// once, and what is left after Job.Grace is killed. With now set it
	// kills at once. Stop does not wait; call Wait.
	//
	// The job's main process (torchrun) is frozen first, so it neither
	// reacts to its workers' ends nor prints a shutdown of its own, and is
	// killed once it is alone: the workers hear of the stop from gorun
	// only, once each.
	Stop(now bool)
	// Interrupt is Stop for a stop from outside (a signal to gorun): each
	// worker gets sig once, and the grace is grace (0: Job.Grace). The
	// first stop's signal and grace hold; a later Stop(true) still kills.
	Interrupt(sig syscall.Signal, grace time.Duration)
	// Signal passes sig to every worker of a relayed job once, stopping
	// nothing; it never blocks.
	Signal(sig syscall.Signal)
	// Tell sends msg to every descendant connected to a relayed job's
	// socket (Job.Relay), whole and after what was told before it; it
	// never blocks (a message the agent's line cannot take now is
	// dropped, whole), and is dropped for other jobs.
	Tell(msg ...byte)
}
