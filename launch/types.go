package launch

import (
	"context"
	"io"
	"time"

	"github.com/gorun/gorun/sshexec"
)

// Node is one node's part of an attempt.
type Node struct {
	Name   string // shown in every output prefix and in errors
	Runner sshexec.Runner
	Job    sshexec.Job
}

// Options tell Run how to supervise.
type Options struct {
	// Attempt returns the nodes to start for attempt k (0 first). It is
	// called before every attempt, so a restart can pick a fresh master port
	// and export the attempt number to the workers.
	Attempt func(ctx context.Context, k int) ([]Node, error)
	// MaxRestarts is how many times the whole group may be restarted.
	MaxRestarts int
	// Backoff is the pause before a restart.
	Backoff time.Duration
	// Out receives every prefixed line (stdout and stderr of all nodes, in
	// arrival order, whole lines only). Diag receives gorun's own messages.
	Out, Diag io.Writer
	// Color prefixes with ANSI colours; main sets it only on a terminal and
	// when NO_COLOR is unset.
	Color bool
	// Kill, when closed, turns a graceful stop into an immediate one (second
	// Ctrl-C).
	Kill <-chan struct{}
}

// Failure says which part of the group failed last, and how.
type Failure struct {
	Node      string
	LocalRank int    // -1 when unknown
	Rank      int    // -1 when unknown
	Code      int    // the worker's exit code where torchrun named it, else torchrun's; -1 if the node was lost
	Reason    string // "exited with 1", "connection lost: ..."
	LastLines []string
}
