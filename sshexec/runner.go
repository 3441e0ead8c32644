package sshexec

import (
	"context"
	"io"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// HeartbeatInterval is how often the head tells the agent that it is alive
// (wire.CtlHeartbeat).
const HeartbeatInterval = time.Second

// Runner reaches one node.
type Runner interface {
	// Node names the node ("node1", or "localhost").
	Node() string
	// Output runs a short command (no agent) and returns its stdout.
	Output(ctx context.Context, argv []string) ([]byte, error)
	// Start starts job under the node agent. Its stdout and stderr are copied
	// to the given writers as they arrive; Start returns once the job runs.
	Start(ctx context.Context, job wire.Job, stdout, stderr io.Writer) (Process, error)
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
	// once, and what is left after wire.Job.Grace is killed. With now set it
	// kills at once. Stop does not wait; call Wait.
	//
	// The job's main process (torchrun) is frozen first, so it neither
	// reacts to its workers' ends nor prints a shutdown of its own, and is
	// killed once it is alone: the workers hear of the stop from gorun
	// only, once each.
	Stop(now bool)
	// Interrupt is Stop for a stop from outside (a signal to gorun): each
	// worker gets sig once, and the grace is grace (0: wire.Job.Grace). The
	// first stop's signal and grace hold; a later Stop(true) still kills.
	Interrupt(sig syscall.Signal, grace time.Duration)
	// Signal passes sig to every worker of a relayed job once, stopping
	// nothing; it never blocks.
	Signal(sig syscall.Signal)
	// Tell sends msg to every descendant connected to a relayed job's
	// socket (wire.Job.Relay), whole and after what was told before it; it
	// never blocks (a message the agent's line cannot take now is
	// dropped, whole), and is dropped for other jobs.
	Tell(msg ...byte)
}
