package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/sshexec"
)

// Node is one node's part of an attempt.
type Node struct {
	Name   string // shown in every output prefix and in errors
	Runner sshexec.Runner
	Job    wire.Job
	// Workers is how many workers the node runs (0: not known). Once all
	// of them, and those of every other node of known size, have joined
	// the rendezvous store, and a restart is left, the next attempt's
	// agent is started on standby (sshexec.Warmer), when the runner can
	// and the job asks for it (Job.Preimport).
	Workers int
	// WarmEarly starts the next attempt's agent on standby as soon as
	// the node's attempt has started, instead of once its workers are
	// past their imports: the node has CPUs to spare for the standby's
	// imports (and its worker pool's) beside the attempt's own, and a
	// crash during start-up then restarts warm too.
	WarmEarly bool
	// Standby are more runners on which the next attempt's agent is
	// started on standby with this node's job, at the same moment as the
	// node's own: the spares that may take a node's place.
	Standby []sshexec.Runner
}

// Options tell Run how to supervise.
type Options struct {
	// Attempt returns the nodes to start for attempt k (0 first). It is
	// called before every attempt, so a restart can pick a fresh master port
	// and export the attempt number to the workers: launch adds nothing to
	// a Job's environment, so GORUN_RESTART_COUNT=k (the group-wide
	// counterpart of torchrun's per-node TORCHELASTIC_RESTART_COUNT) is set
	// by the caller in the Jobs it returns here. rs is the timeline of the
	// restart under way (nil for the first attempt): the caller records
	// in it the milestones it reaches before the restart (GPUFree,
	// Checked).
	Attempt func(ctx context.Context, k int, rs *Restart) ([]Node, error)
	// MaxRestarts is how many times the whole group may be restarted.
	MaxRestarts int
	// Fanout is how many nodes' agents are started at once (0: all).
	Fanout int
	// Backoff is the pause before a restart: none before the first
	// restart after a worker's failure, Backoff before the first one after
	// a lost node, then doubling from Backoff with each restart, up to
	// BackoffMax (0: no cap).
	Backoff, BackoffMax time.Duration
	// Out receives every prefixed line the nodes print on stdout, Err those
	// on stderr (nil: Out), in arrival order, whole lines only. Diag
	// receives gorun's own messages. One goroutine writes all three.
	Out, Err, Diag io.Writer
	// Plain passes lines through as torchrun prints them, with no node
	// prefix: a single local node, where gorun stands in for torchrun.
	Plain bool
	// Color prefixes with ANSI colours; main sets it only on a terminal and
	// when NO_COLOR is unset.
	Color bool
	// Prefix says how the workers' lines are marked: the node and local
	// and global rank ("[node1 3 r11] "), or torchrun's template.
	Prefix Prefix
	// Kill, when closed, turns a graceful stop into an immediate one (second
	// Ctrl-C).
	Kill <-chan struct{}
	// StopGrace is the grace of a stop from outside, when ctx is
	// cancelled: every worker gets the stop's signal once (a Signaled
	// cause's, else SIGTERM), and what is left after StopGrace is killed
	// (0: the Jobs' Grace). A stop launch makes itself, because the group
	// failed, keeps the Jobs' Grace.
	StopGrace time.Duration
	// Signals carries signals to pass to every running worker once each
	// (sshexec.Process.Signal), stopping nothing.
	Signals <-chan syscall.Signal
	// Resize carries the head terminal's new size, for the workers'
	// pseudo-terminals (wire.TellResize).
	Resize <-chan wire.TTY
	// HangTimeout, when positive, is how long the group may go without
	// progress from any worker (an output line, a write, a touch of the
	// file in $GORUN_HEARTBEAT_FILE) before the attempt counts as hung:
	// the silent workers are named, their stacks gathered and grouped by
	// where they are (the culprit lines), and the attempt fails with
	// ExitHang. StartupTimeout (0: HangTimeout) replaces it while some
	// worker has made no progress yet: its start-up (imports, loading).
	HangTimeout, StartupTimeout time.Duration
	// StepTimeout, when positive, is how long the group may go without a
	// training step (Steps) once past its start-up and its first step,
	// even while its workers print: a stall that output hides (a thread
	// that logs while the training loop waits) is a hang too, diagnosed
	// the same way.
	StepTimeout time.Duration
	// SaveStacks, when set, keeps every rank's stacks of a hung attempt
	// (k from 0), with the diagnosis's lines, and returns where they are,
	// which is printed; the console shows the likely culprit's only. It
	// is called from Run's goroutine and may do I/O.
	SaveStacks func(k int, ranks []RankStacks, lines []string) (string, error)
	// LocalRanks, when not nil, are the only local ranks whose lines are
	// printed (torchrun's --local-ranks-filter); the others' lines are kept
	// for the failure summary.
	LocalRanks []int
	// Telemetry, when set, gets the payload of every sidecar frame
	// (wire.FrameTelemetry) a node's agent sends, with the node's name
	// and the attempt (from 0). It is called from that node's stream, so
	// calls for different nodes may be concurrent; the payload is valid
	// only during the call, and the call must not block. What it returns
	// (whole lines, or "") is written to Diag in order with the output.
	Telemetry func(node string, attempt int, payload []byte) string
	// Status, when set with StatusOut, is the live status line kept under
	// the output on StatusOut (a terminal: main sets these only there),
	// given how many lines have been written so far. It is called from the
	// writer goroutine about once a second and after output, and the line
	// is erased before any output and at the end. "" shows nothing.
	Status    func(Counts) string
	StatusOut io.Writer
	// Failed, when set, is told of each failed attempt (k from 0) as soon
	// as it has been stopped, before any restart.
	Failed func(k int, f Failure)
	// Stopping, when set, is told once that attempt k (from 0) begins to
	// be stopped for a failure, with a restart left: while its nodes are
	// still stopping, so that work the next attempt waits for (checking
	// the nodes again) can start now. ctx is the run's. It is called from
	// the supervisor's loop and must not block.
	Stopping func(ctx context.Context, k int)
	// Ahead, when set, gives attempt k+1's nodes as they will be unless
	// something between the attempts changes them (a node dropped or
	// replaced): when a failure would restart the group at once (the
	// first restart after a worker's failure), each node's job goes to
	// its agent on standby (sshexec.AheadHander) as soon as that is in
	// place, while attempt k runs, and the next attempt's start releases
	// it, or stops it when its job differs. Nil nodes: none. It is called
	// at most once per attempt, as the attempt starts, from a goroutine of
	// its own; ctx is the run's.
	Ahead func(ctx context.Context, k int) []Node
}

// Signaled is the cause (context.Cause) of a context cancelled because
// gorun got a stop signal: Run passes Sig on to every worker.
type Signaled struct{ Sig syscall.Signal }

func (s Signaled) Error() string { return fmt.Sprintf("got %v", SignalName(s.Sig)) }

// SignalName is sig's name as torchrun and the shell write it: SIGTERM.
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// stopSignal is the signal a cancelled ctx asks the workers to get.
func stopSignal(ctx context.Context) syscall.Signal {
	var s Signaled
	if errors.As(context.Cause(ctx), &s) && s.Sig != 0 {
		return s.Sig
	}
	return syscall.SIGTERM
}

// ExitHang is the exit code of a job whose last attempt hung: distinct
// from bad input (2) and an interruption (130); timeout(1) uses it too.
const ExitHang = 124

// Phase is where the failing worker, or the group, was when an attempt
// failed, in words: a Failure's Phase, printed in the failure summary and
// written as is to --summary's "phase", which tools parse. Every value
// launch writes is one of the constants below.
type Phase string

const (
	// PhaseStart: a node's torchrun could not be started (its runner's
	// Start failed), so no worker ran there.
	PhaseStart Phase = "start"
	// PhaseRendezvous: a node exited or was lost before any worker of the
	// attempt had started.
	PhaseRendezvous Phase = "rendezvous (no worker had started)"
	// PhaseStartup: the worker failed before it reached the rendezvous
	// store (imports, loading).
	PhaseStartup Phase = "start-up (had not reached the rendezvous store)"
	// PhaseTraining: the worker failed after it joined the rendezvous
	// store, while no worker had finished.
	PhaseTraining Phase = "training"
	// PhaseExit: the worker failed after another worker had exited 0.
	PhaseExit Phase = "exit (other workers had finished)"
	// PhaseHang: the attempt hung (Options.HangTimeout).
	PhaseHang Phase = "hang"
	// PhaseUnknown: a node exited non-zero or was lost after some worker
	// had started, and no worker's own exit says where it was.
	PhaseUnknown Phase = ""
)

// Failure says which part of the group failed last, and how.
type Failure struct {
	Node      string
	LocalRank int // -1 when unknown
	Rank      int // -1 when unknown
	// Code is the worker's own exit code where torchrun's "Root Cause"
	// summary names it (128+N for a worker killed by signal N, as a shell
	// reports it), else torchrun's exit code; -1 when the node was lost or
	// never started.
	Code int
	// Signal is the signal that killed the worker, 0 if none.
	Signal int
	// Phase is where the worker was, one of the Phase constants.
	Phase Phase
	// Reason says what happened in words: "exit 1: worker rank 3 (local
	// rank 1) exited with 7", "node lost: ...", "start: ...".
	Reason string
	// LastLines are the last lines the node printed, prefixed as on Out and
	// without colour, oldest first.
	LastLines []string
}

// Result says how a run went. Attempts counts the attempts started (1 when
// the first attempt succeeded); Failure is the last failure seen, nil when
// the last attempt succeeded.
type Result struct {
	Attempts int
	Failure  *Failure
	// Restarts has one timeline per restart, in order.
	Restarts []Restart
	// Silences has one entry per attempt, in order: how long the group
	// went without progress, in start-up and after it.
	Silences []Silence
	// Steps has one entry per attempt, in order: the training steps and
	// checkpoints the workers' output reported, as their supervisors read
	// it (wire.StepsVar, internal/stepscan).
	Steps []AttemptSteps
}

// Restart is where the time of one restart went, each milestone as an
// offset from the moment the failure was seen (0 where it was not
// reached).
type Restart struct {
	Attempt int       // the attempt that failed, from 0
	Failed  time.Time // the failure seen: the group is being stopped
	// Stopped: every node of the failed attempt has exited and its
	// output is in.
	Stopped time.Duration
	// GPUFree: no process of the job holds GPU memory on any node of the
	// failed attempt (0: nothing was checked, as on CPU nodes).
	GPUFree time.Duration
	// Checked: every node was checked again and the next attempt's plan
	// made (0: no recheck, as with one local node).
	Checked time.Duration
	// Handed: the next attempt's torchrun was handed its command line
	// (its agents started, or warm ones given their jobs). Handed ahead
	// (Options.Ahead), on Ahead of the nodes: before Stopped, and
	// negative when the last node was handed its job before the failure.
	Handed time.Duration
	Ahead  int
	// AheadUsed of the Ahead nodes had that job released at the start;
	// the others' jobs were stopped unused (the next attempt's job there
	// differed: a node replaced or dropped by the recheck) and they
	// started as if nothing had been handed.
	AheadUsed int
	// Released: the next attempt's start released the jobs handed ahead
	// (0: none was).
	Released time.Duration
	// Warm of Nodes of the next attempt started warm.
	Warm, Nodes int
	// Pooled of Workers of the next attempt were taken from their
	// node's worker pool (wire.Job.Pool); Workers counts only when the
	// job has one.
	Pooled, Workers int
	// WorkersUp: every worker of the next attempt has started (the
	// first worker, when the node does not say how many it runs).
	WorkersUp time.Duration
	// FirstLine: the first line a worker of the next attempt printed.
	FirstLine time.Duration
}
