package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/sshexec"
)

// errUnreachable marks a node gorun could not reach; nothing was started.
var errUnreachable = errors.New("cannot reach every node; nothing was started")

// errSSHSettings marks ssh settings that would fail every connection (a
// missing known_hosts, a key ssh would refuse); nothing was started.
var errSSHSettings = errors.New("the ssh settings would fail every connection; nothing was started")

// connect returns one runner per host: Local in local mode; srun steps for
// every node inside a Slurm allocation (useSrun); else Local for the head
// itself and SSH for the rest, dialled in parallel. On any failure every
// connection is closed and the error names each failing host.
func connect(ctx context.Context, cl cmdline.CommandLine, hosts []hosts.Host, self string, stderr io.Writer) (map[string]sshexec.Runner, error) {
	var err error
	runners := make(map[string]sshexec.Runner)
	if len(hosts) == 0 {
		runners["localhost"] = sshexec.NewLocal(self)
		return runners, nil
	}
	if srun, err := useSrun(cl.Gorun, hosts); err != nil || srun {
		if err != nil {
			return nil, err
		}
		return connectSrun(ctx, cl, hosts, self)
	}
	cfg := sshexec.Config{
		User: cl.Gorun.SSHUser, Port: cl.Gorun.SSHPort, Identity: cl.Gorun.SSHIdentity,
		SSHConfigFile: cl.Gorun.SSHConfig, KnownHosts: cl.Gorun.KnownHosts,
		AcceptNew: cl.Gorun.SSHAcceptNew, RemoteGorun: cl.Gorun.RemoteGorun,
		Warn: func(m string) { fmt.Fprintln(stderr, "gorun: warning:", m) },
	}
	var remote []string
	for _, h := range hosts {
		if sshexec.IsLocalHost(h.Name) {
			runners[h.Name] = sshexec.NewLocal(self)
		} else {
			remote = append(remote, h.Name)
		}
	}
	if len(remote) == 0 {
		return runners, nil
	}
	// The files and keys ssh would refuse, refused before any connection.
	if err := cfg.Check(ctx); err != nil {
		return nil, fmt.Errorf("%w:\n%w", errSSHSettings, err)
	}
	if cfg.RemoteGorun == "" {
		// Hashed once: every node runs the same content-addressed copy,
		// uploaded on first use where it is missing.
		if cfg.Agent, err = sshexec.HashBinary(self); err != nil {
			return nil, fmt.Errorf("read the gorun binary: %w", err)
		}
	}
	dialled, err := sshexec.DialAll(ctx, remote, cfg, sshexec.DefaultFanout)
	for name, r := range dialled {
		runners[name] = r
	}
	if err != nil {
		closeAll(runners)
		return nil, fmt.Errorf("%w:\n%w", errUnreachable, err)
	}
	return runners, nil
}

func closeAll(runners map[string]sshexec.Runner) {
	for _, r := range runners {
		r.Close()
	}
}

// runLaunch is the main job: parse, resolve hosts, connect, check, plan,
// then print the plan (--dry-run) or launch and supervise.
func runLaunch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl, err := cmdline.Parse(args, os.Getenv)
	if errors.Is(err, cmdline.ErrHelp) {
		_, err = io.WriteString(stdout, usage())
		return err
	}
	if err != nil {
		return err
	}
	if more := slurmStepArgs(args, cl); len(more) > len(args) {
		if cl, err = cmdline.Parse(more, os.Getenv); err != nil {
			return err
		}
	}
	hosts, err := resolveHosts(cl.Gorun)
	if err != nil {
		return err
	}
	if err := checkScript(cl, len(hosts) > 0); err != nil {
		return err
	}
	if _, err := useSrun(cl.Gorun, hosts); err != nil {
		return err
	}
	spec := envplan.Spec{CommandLine: cl, Hosts: hosts, Environ: environ(), RunID: runID()}
	if _, err := envplan.Build(spec, nil); err != nil { // refuse bad input before connecting anywhere
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate the gorun binary: %w", err)
	}

	var facts envplan.Facts
	var preflightText strings.Builder // for --report
	var runners map[string]sshexec.Runner
	if !cl.Gorun.DryRun || cl.Gorun.Preflight != "off" {
		runners, err = connect(ctx, cl, hosts, self, stderr)
		if err != nil {
			return interrupted(ctx, "while connecting to the nodes", err)
		}
		defer closeAll(runners)
	}
	if cl.Gorun.Preflight != "off" {
		report := checkNodes(ctx, cl, hosts, runners, stderr)
		if ctx.Err() != nil {
			return interrupted(ctx, "during preflight; nothing was started", nil)
		}
		failed := !report.OK
		if cl.Gorun.Report != "" {
			report.WriteText(&preflightText)
		}
		switch {
		case failed || hasWarnings(report):
			report.WriteText(stderr)
		case len(hosts) > 0: // all clear: one line, the first of the report
			var b strings.Builder
			report.WriteText(&b)
			first, _, _ := strings.Cut(b.String(), "\n")
			fmt.Fprintln(stderr, first)
		}
		if failed && cl.Gorun.Preflight == "on" {
			return errPreflightFailed
		}
		facts = planFacts(report)
	}
	plan, err := envplan.Build(spec, facts)
	if err != nil {
		return err
	}
	if cl.Gorun.DryRun {
		return renderPlan(stdout, plan, cl.Gorun.Format)
	}
	if len(hosts) > 0 {
		envplan.RenderBrief(stderr, plan)
	}
	watch, err := newGPUWatch(cl, args, preflightText.String())
	if err != nil {
		return err
	}
	return supervise(ctx, cl, spec, plan, runners, watch, stdout, stderr)
}

// checkScript refuses a training script torchrun would only fail on after
// starting: a mistyped subcommand, or, in local mode, a script that is not
// there. -m and --no-python name a module or a program, not a file; on
// several nodes the script lives on the nodes, and preflight hashes it
// there.
func checkScript(cl cmdline.CommandLine, multiNode bool) error {
	script := cl.Torchrun.TrainingScript
	if cl.Torchrun.Module || cl.Torchrun.NoPython {
		return nil
	}
	_, err := os.Stat(script)
	if err == nil {
		return nil
	}
	if !strings.ContainsAny(script, "/.") {
		for _, c := range []string{"preflight", "hosts", "version", "help"} {
			if userr.EditDistance(script, c) <= 2 {
				return &userr.InputError{Where: script, Problem: "is neither a file nor a gorun command",
					Fix: fmt.Sprintf("did you mean `gorun %s`? (gorun --help lists the commands)", c)}
			}
		}
	}
	if multiNode {
		return nil
	}
	return &userr.InputError{Where: "training script", Problem: err.Error(),
		Fix: "give the path of the script to run (relative to this directory), or -m MODULE, or --no-python PROGRAM"}
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

// localRanks reads --local-ranks-filter ("0,2"), which the parser has
// checked; nil shows every rank.
func localRanks(filter string) []int {
	if filter == "" {
		return nil
	}
	var ranks []int
	for _, f := range strings.Split(filter, ",") {
		if r, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			ranks = append(ranks, r)
		}
	}
	return ranks
}

// restartBackoff is the pause between a failed attempt and the next: long
// enough for the old attempt's sockets to close, short next to the
// workers' start.
const restartBackoff = time.Second

// supervise runs the plan under launch.Run, with a second Ctrl-C turning
// the graceful stop into an immediate one.
func supervise(ctx context.Context, cl cmdline.CommandLine, spec envplan.Spec, plan envplan.Plan, runners map[string]sshexec.Runner, watch *gpuWatch, stdout, stderr io.Writer) error {
	head := len(spec.Hosts) > 0
	kill, finished := make(chan struct{}), make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
		case <-finished:
			return
		}
		second := make(chan os.Signal, 1)
		signal.Notify(second, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(second)
		select {
		case <-second:
			close(kill)
		case <-finished:
		}
	}()
	opts := launch.Options{
		Attempt: func(ctx context.Context, k int) ([]launch.Node, error) {
			if k > 0 && cl.Gorun.FlightRecorder != "" {
				gatherFlightRecorder(ctx, cl.Gorun.FlightRecorder, spec.RunID, k-1, plan, runners, stderr)
			}
			if k > 0 && head {
				var err error
				if spec, plan, err = recheck(ctx, cl, spec, plan, runners, stderr); err != nil {
					return nil, err
				}
			}
			if k > 0 {
				plan = freshMasterPort(ctx, plan, stderr)
			}
			nodes, err := attempt(plan, runners, k)
			return watch.attach(plan, k, nodes), err
		},
		MaxRestarts: cl.Torchrun.MaxRestarts, // gorun restarts the whole group; each torchrun runs with 0
		Backoff:     restartBackoff,
		HangTimeout: cl.Gorun.HangTimeout,
		LocalRanks:  localRanks(cl.Torchrun.LocalRanksFilter),
		Out:         stdout,
		Err:         stderr,
		Diag:        stderr,
		Plain:       !head, // one local node: print exactly what torchrun prints
		Color:       useColor(stdout),
		Kill:        kill,
	}
	watch.options(&opts, stderr)
	res, err := launch.Run(ctx, opts)
	watch.finish(res, err, stderr)
	if cl.Gorun.FlightRecorder != "" && res.Attempts > 0 {
		// The last attempt's dumps (none after a success), and the nodes'
		// folders cleared, whatever the end; not after a second Ctrl-C.
		gatherFlightRecorder(context.WithoutCancel(ctx), cl.Gorun.FlightRecorder, spec.RunID, res.Attempts-1, plan, runners, stderr)
	}
	return err
}

// freshMasterPort moves the rendezvous store to the next free port when the
// one the plan uses still accepts connections as the group restarts (a
// store left by a process that is not the job's, or a port taken since).
func freshMasterPort(ctx context.Context, plan envplan.Plan, diag io.Writer) envplan.Plan {
	port, ok := plan.MasterPort()
	if !ok {
		return plan
	}
	held := func(p int) bool {
		d := net.Dialer{Timeout: 500 * time.Millisecond}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(plan.Config.MasterAddr, strconv.Itoa(p)))
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	for p := port; p < port+32 && p < 65536; p++ {
		if !held(p) {
			if p != port {
				fmt.Fprintf(diag, "gorun: master port %d is still held; the group restarts on port %d\n", port, p)
			}
			return plan.WithMasterPort(p)
		}
	}
	return plan
}

// attempt turns the plan into one job per node for attempt k.
func attempt(plan envplan.Plan, runners map[string]sshexec.Runner, k int) ([]launch.Node, error) {
	cwd, _ := os.Getwd()
	nodes := make([]launch.Node, 0, len(plan.Nodes))
	for _, n := range plan.Nodes {
		env := make(map[string]string, len(n.Env)+1)
		for name, v := range n.Env {
			if v.Source != envplan.SourceTorchrun {
				env[name] = v.Value
			}
		}
		env[launch.RestartCountVar] = strconv.Itoa(k)
		argv := slices.Clone(n.Command)
		for i, a := range argv {
			if a == envplan.GorunSelf {
				argv[i] = sshexec.SelfArg // the node's agent knows where its gorun is
			}
		}
		nodes = append(nodes, launch.Node{
			Name:   n.Host,
			Runner: runners[n.Host],
			Job:    sshexec.Job{Argv: argv, Env: env, Dir: cwd},
		})
	}
	return nodes, nil
}

func useColor(w io.Writer) bool {
	if _, ok := os.LookupEnv("NO_COLOR"); ok {
		return false
	}
	return isTerminal(w)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
