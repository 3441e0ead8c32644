package job

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// Outcomes main maps to exit codes of their own.
var (
	// ErrPreflightFailed: preflight failed a node's health (its driver,
	// GPUs, links, network); nothing was started. Other nodes may pass.
	ErrPreflightFailed = errors.New("preflight failed; nothing was started")
	// ErrPreflightInput: preflight failed what the job asks or brings
	// (preflight.Finding.OfTheJob); nothing was started, and nothing
	// would on another node like these.
	ErrPreflightInput = errors.New("preflight failed on what the job asks of the nodes; nothing was started")
	// ErrRecheckFailed: a node failed its checks before a restart, and the
	// group could not go on without it. Attempts had run.
	ErrRecheckFailed = errors.New("a node failed its checks before a restart")
	// ErrUnreachable: a node could not be reached; nothing was started.
	ErrUnreachable = errors.New("cannot reach every node; nothing was started")
	// ErrSSHSettings: the ssh settings would fail every connection (a
	// missing known_hosts, a key ssh would refuse); nothing was started.
	ErrSSHSettings = errors.New("the ssh settings would fail every connection; nothing was started")
	// ErrOutput: the job ran, but a file it was asked to write at the end
	// (--report, --telemetry) could not be written.
	ErrOutput = errors.New("an output file could not be written")
	// ErrGPUNotFreed: before a restart, a process of the job still held
	// GPU memory on a node once the teardown check's bound had passed. It
	// wraps ErrRecheckFailed, so main exits with the recheck's code: a
	// node is not fit for the next attempt either way.
	ErrGPUNotFreed = fmt.Errorf("%w: the job's processes still hold GPU memory", ErrRecheckFailed)
)

// PreflightError is the error for a failed report: ErrPreflightInput
// where a failure is the job's, ErrPreflightFailed where all are the
// nodes'.
func PreflightError(r preflight.Report) error {
	if r.Fault == "input" {
		return ErrPreflightInput
	}
	return ErrPreflightFailed
}

// Config is what main hands Run: the parsed command line and the side
// effects only main may read.
type Config struct {
	// Args is the command line after "gorun", as typed: the report shows it
	// (secrets redacted), and `srun gorun` parses it again with the node
	// rank Slurm gives.
	Args        []string
	CommandLine cmdline.CommandLine
	Getenv      func(string) string
	Environ     map[string]string // the head's environment
	Self        string            // this gorun binary, uploaded to the nodes
	Dir         string            // the working directory every node's job starts in
	RunID       string            // names what this run keeps on the nodes; "" picks one at random
	// LookPath finds a program on the head's PATH (exec.LookPath).
	LookPath func(string) (string, error)
}

// UI is where a run writes, and what main knows of the terminal.
type UI struct {
	Out, Err io.Writer
	// Lines is where the nodes' stderr lines go: Err without the stamps
	// --timestamps puts on gorun's own lines. Nil: Err.
	Lines io.Writer
	// Color: Out is a terminal and NO_COLOR is unset.
	Color bool
	// Live: Err is a terminal that can redraw a line in place (not
	// TERM=dumb): the preflight progress and the status line go there.
	Live bool
	// Width is Err's width in columns now, 0 when unknown; read on every
	// redraw, so a resized terminal is followed.
	Width func() int
	// Merged: Out and Err are the same file (a terminal, 2>&1), so each
	// worker's stdout and stderr are one pipe, in order
	// (wire.MergedOutputVar).
	Merged bool
	// Kill, when closed, turns a graceful stop into an immediate one (a
	// second Ctrl-C).
	Kill <-chan struct{}
	// Signals carries the signals to pass on to every running worker
	// (launch.Options.Signals).
	Signals <-chan syscall.Signal
	// TTY says which of Out and Err are terminals, and their size: each
	// worker's streams are pseudo-terminals of that size there
	// (wire.TTYVar).
	TTY wire.TTY
	// Resize carries the terminal's new size (launch.Options.Resize).
	Resize <-chan wire.TTY
	// Stdin, when set, gives what local rank 0's worker reads as stdin
	// on a local node (wire.Job.Stdin); it is called once the job
	// starts, so nothing is read of gorun's stdin before.
	Stdin func() (*os.File, error)
}

func (ui UI) width() int {
	if ui.Width == nil {
		return 0
	}
	return ui.Width()
}

// run is one job's state on the head.
type run struct {
	cfg   Config
	cl    cmdline.CommandLine
	ui    UI
	spec  envplan.Spec
	conns map[string]sshexec.Runner
	facts envplan.Facts // preflight's, nil without it
	// perPod: this gorun is one pod's torchrun (TransportPod); the other
	// nodes, and the master port they were told, are not its to change.
	perPod bool
	// spares wait to take a failing node's place (nil: none).
	spares *spares
	// torch is where the checks found each node's torch.
	torch torchPlaces
	// start is when this gorun began: the goodput's wall time is from it.
	start time.Time
}

// Run is the main job: resolve the hosts, connect, check, plan, then print
// the plan (--dry-run) or launch and supervise every attempt.
func Run(ctx context.Context, cfg Config, ui UI) (err error) {
	// The hooks say things between attempts from Run's goroutine while
	// launch's writer goroutine may still be writing: one lock for both.
	// The nodes' lines share the lock.
	var mu sync.Mutex
	ui.Err, ui.Lines = &lockedWriter{mu: &mu, w: ui.Err}, &lockedWriter{mu: &mu, w: ui.lines()}
	start := time.Now()
	var atFault []string
	defer func() {
		if werr := writeRefused(cfg, start, err, atFault); werr != nil {
			fmt.Fprintf(ui.Err, "gorun: %v\n", werr)
		}
	}()
	if cfg.RunID == "" {
		cfg.RunID = newRunID()
	}
	cl, err := slurmStep(cfg)
	if err != nil {
		return err
	}
	nodes, err := ResolveHosts(cl.Gorun, cfg.Getenv)
	if err != nil {
		return err
	}
	if err := checkScript(cl, len(nodes) > 0); err != nil {
		return err
	}
	cl = autoPrewarm(cl)
	transport, err := chooseTransport(cl, nodes, cfg)
	if err != nil {
		return err
	}
	if transport == TransportPod {
		fmt.Fprintln(ui.Err, podLine(cl))
	}
	active, sp := splitSpares(cl, nodes)
	r := &run{cfg: cfg, cl: cl, ui: ui, perPod: transport == TransportPod, spares: sp, start: start,
		spec: envplan.Spec{CommandLine: cl, Hosts: active, Environ: cfg.Environ, RunID: cfg.RunID}}
	if _, err := envplan.Build(r.spec, nil); err != nil { // bad input refused before connecting anywhere
		return err
	}
	if sp != nil {
		fmt.Fprintf(ui.Err, "gorun: %d of %d nodes run the job (--nnodes %s); spares, in this order, for a node that fails: %s\n",
			len(active), len(nodes), nnodesText(cl.Torchrun), strings.Join(hostNames(sp.ready), ", "))
	}
	outs, err := checkOutputs(cl, cfg.Self)
	if err != nil {
		return err
	}
	if cl.Gorun.DryRun && cl.Gorun.Preflight == "off" {
		plan, err := envplan.Build(r.spec, nil)
		if err != nil {
			return err
		}
		return renderPlan(ui.Out, plan, cl.Gorun.Format)
	}
	if r.conns, err = Connect(ctx, cl, active, cfg, ui); err != nil {
		atFault = unreachedHosts(err)
		return interrupted(ctx, "while connecting to the nodes", err)
	}
	defer closeAll(r.conns)
	if sp != nil {
		r.connectSpares(ctx)
	}

	var facts envplan.Facts
	var preflightText string // for --report
	if cl.Gorun.Preflight != "off" {
		var first []launch.Node // the first attempt's torchrun imports while preflight runs
		if !cl.Gorun.DryRun && sp == nil {
			first = r.firstJobs()
		}
		if first != nil {
			warmed := make(chan struct{})
			go func() {
				defer close(warmed)
				launch.WarmFirst(ctx, first)
			}()
			defer func() { <-warmed }() // before the runners close
		}
		report := Check(ctx, cl, nodes, r.conns, cfg, ui)
		if ctx.Err() != nil {
			return interrupted(ctx, "during preflight; nothing was started", nil)
		}
		r.torch.learn(report)
		var text strings.Builder
		report.WriteText(&text)
		switch {
		case !report.OK || hasWarnings(report):
			io.WriteString(ui.Err, text.String())
		case len(nodes) > 0 || r.perPod: // all clear: one line, the first of the report
			first, _, _ := strings.Cut(text.String(), "\n")
			fmt.Fprintln(ui.Err, first)
		}
		if sp != nil {
			if report, err = r.chooseActive(ctx, report); err != nil {
				return err
			}
		}
		if !report.OK && cl.Gorun.Preflight == "on" {
			atFault = slices.Sorted(maps.Keys(failedNodes(report, true)))
			return PreflightError(report)
		}
		preflightText = text.String()
		facts = planFacts(report)
		r.facts = facts
	}
	plan, err := envplan.Build(r.spec, facts)
	if err != nil {
		return err
	}
	if cl.Gorun.DryRun {
		return renderPlan(ui.Out, plan, cl.Gorun.Format)
	}
	if len(nodes) > 0 {
		envplan.RenderBrief(ui.Err, plan)
	}

	if err := outs.create(); err != nil {
		return err
	}
	hooks, err := r.hooks(outs, preflightText, plan)
	if err != nil {
		return err
	}
	return r.supervise(ctx, plan, hooks)
}

// newRunID names what one run keeps on the nodes (GORUN_RUN_ID, the
// flight recorder's folders).
func newRunID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// lockedWriter serializes writes to w.
// lines is Lines, else Err.
func (ui UI) lines() io.Writer {
	if ui.Lines != nil {
		return ui.Lines
	}
	return ui.Err
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// interrupted turns err into an interruption when the user's signal is
// what ended the step (an interruption exits 130, not 2), and returns err
// as it is otherwise.
func interrupted(ctx context.Context, when string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w %s", launch.ErrInterrupted, when)
}

func renderPlan(w io.Writer, plan envplan.Plan, format string) error {
	switch format {
	case "json":
		return envplan.RenderJSON(w, plan)
	case "shell":
		return envplan.RenderShell(w, plan)
	default:
		return envplan.RenderTable(w, plan)
	}
}
