// Command gorun is a drop-in replacement for torchrun: the same command line,
// plus launch from one head node over SSH, preflight checks on every node, an
// environment plan with a reason for every variable, and whole-group
// supervision that leaves no process behind.
//
// main.go is the composition root: it parses the command line, creates every
// side effect (signal context, NVML, SSH clients, stdout) and maps errors to
// exit codes in one place (exitCode). The packages do the work.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// Exit codes, as a user of torchrun expects them plus gorun's own.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2 // bad input, or preflight found a failure; nothing started
	exitInterrupted = 130
)

// errPreflightFailed means preflight found a failure and nothing was started.
var errPreflightFailed = errors.New("preflight failed; nothing was started")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newApp(ctx).Run(os.Args)
	stop()
	os.Exit(exitCode(err))
}

// exitCode is the one place errors become exit codes.
func exitCode(err error) int {
	var input *envplan.InputError
	var failed *launch.JobFailed
	var exit cli.ExitCoder
	switch {
	case err == nil, errors.Is(err, envplan.ErrHelp):
		return exitOK
	case errors.As(err, &failed):
		return failed.ExitCode() // launch has printed the failure summary
	case errors.Is(err, launch.ErrInterrupted):
		fmt.Fprintln(os.Stderr, "gorun:", err)
		return exitInterrupted
	case errors.As(err, &exit):
		return exit.ExitCode()
	case errors.As(err, &input), errors.Is(err, errPreflightFailed),
		errors.Is(err, preflight.ErrBadCapture), errors.Is(err, errUnreachable):
		fmt.Fprintln(os.Stderr, "gorun:", err)
		return exitUsage
	default:
		fmt.Fprintln(os.Stderr, "gorun:", err)
		return exitFailure
	}
}

func newApp(ctx context.Context) *cli.App {
	return &cli.App{
		Name:      "gorun",
		Usage:     "torchrun, launched from one head node, checked first, supervised as one group",
		UsageText: "gorun [gorun options] [torchrun options] training_script [script args...]\n   gorun preflight [options] [script]\n   gorun hosts [--hosts|--hostfile|Slurm] [--json]",
		// The launch command line follows torchrun's argparse rules, which
		// urfave/cli's flag parser does not; envplan parses it.
		SkipFlagParsing: true,
		HideHelp:        true,
		HideVersion:     true,
		// exitCode alone prints errors and picks the exit code; urfave/cli
		// would print an ExitCoder's message again and exit on its own.
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			return runLaunch(ctx, c.Args().Slice(), c.App.Writer, c.App.ErrWriter)
		},
		Commands: []*cli.Command{
			{
				Name:            "preflight",
				Usage:           "check every node (driver, GPUs, links, versions) and print a report",
				UsageText:       "gorun preflight [--json] [--topo-file FILE] [gorun options] [torchrun options] [script]",
				SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return runPreflight(ctx, c.Args().Slice(), c.App.Writer, c.App.ErrWriter)
				},
			},
			{
				Name:  "hosts",
				Usage: "print the resolved host list in launch order",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "hosts", Usage: "h1:8,h2:8"},
					&cli.StringFlag{Name: "hostfile", Usage: "DeepSpeed or MPI hostfile"},
					&cli.StringFlag{Name: "include", Usage: "DeepSpeed include filter (host1:0,2@host2)"},
					&cli.StringFlag{Name: "exclude", Usage: "DeepSpeed exclude filter"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				},
				Action: func(c *cli.Context) error {
					opts := envplan.Options{Hosts: c.String("hosts"), Hostfile: c.String("hostfile"),
						Include: c.String("include"), Exclude: c.String("exclude")}
					return runHosts(opts, c.Bool("json"), c.App.Writer)
				},
			},
			{
				Name:  "version",
				Usage: "print gorun's version",
				Action: func(c *cli.Context) error {
					_, err := fmt.Fprintln(c.App.Writer, "gorun", version())
					return err
				},
			},
			{
				// The node agent: started by the head (locally or over SSH) to
				// run one job and tear its whole tree down.
				Name: "_agent", Hidden: true, SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return cli.Exit("", sshexec.ServeAgent(ctx, os.Stdin, os.Stdout, os.Stderr))
				},
			},
			{
				// The worker's supervisor: torchrun starts it in place of
				// each worker (see envplan's wrapWorkers and launch.RunWorker).
				Name: envplan.RankCommand, Hidden: true, SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return cli.Exit("", launch.RunWorker(c.Args().Slice(), os.Getenv, os.Stderr))
				},
			},
			{
				// The node-side collector: prints this node's Facts as JSON.
				Name: "_collect", Hidden: true, SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					var req collectRequest
					if err := json.Unmarshal([]byte(c.Args().First()), &req); err != nil {
						return fmt.Errorf("_collect: bad request: %w", err)
					}
					return json.NewEncoder(c.App.Writer).Encode(collectLocal(ctx, req))
				},
			},
		},
	}
}

// usage is `gorun --help`: torchrun's command line plus gorun's options.
func usage() string {
	var b strings.Builder
	b.WriteString(`usage: gorun [gorun options] [torchrun options] training_script [script args...]
       gorun preflight [--json] [--topo-file FILE] [gorun options] [torchrun options] [script]
       gorun hosts [--hosts LIST | --hostfile FILE] [--include|--exclude SPEC] [--json]
       gorun version

A drop-in replacement for torchrun: the same options, plus launch on every
node from this one, preflight checks, a plan with a reason for every
variable, and whole-group supervision. Without --hosts, --hostfile or a
Slurm allocation it runs torchrun here, as torchrun would.

gorun options:
  --hosts h1:8,h2:8        nodes and their GPU slots, in launch order
  --hostfile FILE          DeepSpeed (host slots=N) or MPI (host[:N]) hostfile
  --include/--exclude SPEC DeepSpeed filter: host1:0,2@host2 (not both)
  --env KEY=VALUE          set a variable on every node (repeatable; wins)
  --torchrun CMD           how torchrun starts on a node (default: torchrun)
  --dry-run                print the plan and run nothing
  --format table|json|shell  how --dry-run prints the plan (default table)
  --preflight on|warn|off  on: any failed check stops the launch (default)
  --max-restarts N         (torchrun's) whole-group restarts, each a fresh torchrun
  --ssh-config FILE        ssh_config to read (default ~/.ssh/config)
  --ssh-user USER, --ssh-port N, --ssh-identity FILE
  --known-hosts FILE       known_hosts to verify host keys against
  --ssh-accept-new         record the key of a host never seen (never a changed one)
  --remote-gorun PATH      use this gorun on the nodes instead of uploading it
  --hang-timeout DURATION  no progress from any worker for this long is a hang:
                           stacks printed, attempt failed (default 30m; 0: off)
  --flight-recorder DIR    PyTorch's NCCL flight recorder in every worker;
                           every rank's dump gathered under DIR on a failure

torchrun options (torchrun --help explains them; dash or underscore spelling):
`)
	line := " "
	for _, name := range envplan.TorchrunOptionNames() {
		if len(line)+len(name)+1 > 78 {
			b.WriteString(line + "\n")
			line = " "
		}
		line += " " + name
	}
	b.WriteString(line + "\n")
	return b.String()
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// runHosts prints the resolved host list.
func runHosts(opts envplan.Options, asJSON bool, out io.Writer) error {
	hosts, err := resolveHosts(opts)
	if err != nil {
		return err
	}
	if hosts == nil {
		hosts = []envplan.Host{}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(hosts)
	}
	for _, h := range hosts {
		slots := "?"
		if h.Slots > 0 {
			slots = strconv.Itoa(h.Slots)
		}
		gpus := "all"
		if h.GPUs != nil {
			gpus = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(h.GPUs)), ","), "[]")
		}
		fmt.Fprintf(out, "%s\tslots=%s\tgpus=%s\n", h.Name, slots, gpus)
	}
	return nil
}

func resolveHosts(opts envplan.Options) ([]envplan.Host, error) {
	var data []byte
	if opts.Hostfile != "" && opts.Hosts == "" { // both: ResolveHosts says they exclude each other
		var err error
		if data, err = os.ReadFile(opts.Hostfile); err != nil {
			return nil, &envplan.InputError{Where: "--hostfile", Problem: err.Error(),
				Fix: "give the path of a readable hostfile"}
		}
	}
	return envplan.ResolveHosts(opts.Hosts, opts.Hostfile, data, opts.Include, opts.Exclude, os.Getenv)
}

// environ returns the process environment as a map.
func environ() map[string]string {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// errUnreachable marks a node gorun could not reach; nothing was started.
var errUnreachable = errors.New("cannot reach every node; nothing was started")

// connect returns one runner per host: Local for the head itself (or local
// mode), SSH for the rest, dialled in parallel. On any failure every
// connection is closed and the error names each failing host.
func connect(ctx context.Context, cl envplan.CommandLine, hosts []envplan.Host, self string) (map[string]sshexec.Runner, error) {
	var err error
	runners := make(map[string]sshexec.Runner)
	if len(hosts) == 0 {
		runners["localhost"] = sshexec.NewLocal(self)
		return runners, nil
	}
	cfg := sshexec.Config{
		User: cl.Gorun.SSHUser, Port: cl.Gorun.SSHPort, Identity: cl.Gorun.SSHIdentity,
		SSHConfigFile: cl.Gorun.SSHConfig, KnownHosts: cl.Gorun.KnownHosts,
		AcceptNew: cl.Gorun.SSHAcceptNew, RemoteGorun: cl.Gorun.RemoteGorun,
	}
	var remote []string
	for _, h := range hosts {
		if sshexec.IsLocalHost(h.Name) {
			runners[h.Name] = sshexec.NewLocal(self)
		} else {
			remote = append(remote, h.Name)
		}
	}
	if len(remote) > 0 && cfg.RemoteGorun == "" {
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
		return nil, fmt.Errorf("%w:\n%v", errUnreachable, err)
	}
	return runners, nil
}

func closeAll(runners map[string]sshexec.Runner) {
	for _, r := range runners {
		r.Close()
	}
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

// runLaunch is the main job: parse, resolve hosts, connect, check, plan,
// then print the plan (--dry-run) or launch and supervise.
func runLaunch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl, err := envplan.ParseCommandLine(args, os.Getenv)
	if errors.Is(err, envplan.ErrHelp) {
		_, err = io.WriteString(stdout, usage())
		return err
	}
	if err != nil {
		return err
	}
	hosts, err := resolveHosts(cl.Gorun)
	if err != nil {
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
	var runners map[string]sshexec.Runner
	if !cl.Gorun.DryRun || cl.Gorun.Preflight != "off" {
		runners, err = connect(ctx, cl, hosts, self)
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
	return supervise(ctx, cl, spec, plan, runners, stdout, stderr)
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
func supervise(ctx context.Context, cl envplan.CommandLine, spec envplan.Spec, plan envplan.Plan, runners map[string]sshexec.Runner, stdout, stderr io.Writer) error {
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
	res, err := launch.Run(ctx, launch.Options{
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
			return attempt(plan, runners, k)
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
	})
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

// runPreflight runs only the checks (or explains a pasted topology).
func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	asJSON, topoFile, rest, err := preflightArgs(args)
	if err != nil {
		return err
	}
	if topoFile != "" {
		data, err := os.ReadFile(topoFile)
		if err != nil {
			return &envplan.InputError{Where: "--topo-file", Problem: err.Error(), Fix: "give the path of a saved `nvidia-smi topo -m` output"}
		}
		rep, err := preflight.ExplainTopology(topoFile, data)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, rep)
		}
		rep.WriteText(stdout)
		return nil
	}
	cl, err := envplan.ParseCommandLine(append(rest, "-"), os.Getenv) // the script is optional here
	if err != nil {
		return err
	}
	if cl.Torchrun.TrainingScript == "-" {
		cl.Torchrun.TrainingScript = ""
	}
	hosts, err := resolveHosts(cl.Gorun)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	runners, err := connect(ctx, cl, hosts, self)
	if err != nil {
		return interrupted(ctx, "while connecting to the nodes", err)
	}
	defer closeAll(runners)
	report := checkNodes(ctx, cl, hosts, runners, stderr)
	if ctx.Err() != nil {
		return interrupted(ctx, "during preflight", nil)
	}
	if asJSON {
		err = writeJSON(stdout, report)
	} else {
		report.WriteText(stdout)
	}
	if err == nil && !report.OK {
		return errPreflightFailed
	}
	return err
}

// preflightArgs takes preflight's own options off the front of args.
func preflightArgs(args []string) (asJSON bool, topoFile string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--json":
			asJSON = true
		case a == "--topo-file" || a == "--topo_file":
			if i+1 >= len(args) {
				return false, "", nil, &envplan.InputError{Where: a, Problem: "expected a file name", Fix: "--topo-file FILE"}
			}
			i++
			topoFile = args[i]
		case strings.HasPrefix(a, "--topo-file=") || strings.HasPrefix(a, "--topo_file="):
			topoFile = a[len("--topo-file="):]
		default:
			rest = append(rest, a)
		}
	}
	return asJSON, topoFile, rest, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkNodes collects facts on every node in parallel and evaluates the
// checks, per node and across nodes, plus the head-side lints (the NCCL
// variables the user exported, the training script).
func checkNodes(ctx context.Context, cl envplan.CommandLine, hosts []envplan.Host, runners map[string]sshexec.Runner, progress io.Writer) preflight.Report {
	routeTo, probePort := masterAddress(cl, hosts, runners)
	type node struct {
		name string
		gpus []int
	}
	nodes := []node{{name: "localhost"}}
	if len(hosts) > 0 {
		nodes = nodes[:0]
		for _, h := range hosts {
			nodes = append(nodes, node{h.Name, h.GPUs})
		}
	}
	reports := make([]preflight.NodeReport, len(nodes))
	var wg sync.WaitGroup
	done := make(chan struct{}, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer func() { done <- struct{}{}; wg.Done() }()
			want := preflight.Want{NProc: cl.Torchrun.NProcPerNode, GPUsRequested: cl.Torchrun.NProcPerNode == "gpu", GPUIDs: n.gpus}
			opts := collectRequest{Torchrun: cl.Gorun.Torchrun, Script: cl.Torchrun.TrainingScript, RouteTo: routeTo, ProbePort: probePort}
			facts, err := collectOn(ctx, runners[n.name], opts)
			if err != nil {
				reports[i] = preflight.NodeReport{Host: n.name, Findings: []preflight.Finding{{
					ID: "node.reach", Severity: preflight.SeverityFail, Message: "cannot collect facts on " + n.name,
					Evidence: err.Error(), Remedy: "check that the node is up and that gorun can run there"}}}
				return
			}
			facts.Host = n.name
			reports[i] = preflight.NodeReport{Host: n.name, Facts: facts, Findings: preflight.Check(facts, want)}
		}()
	}
	showProgress(progress, len(nodes), done)
	wg.Wait()
	across := preflight.CheckAcross(reports)
	across = append(across, preflight.LintNCCLEnv(environ())...)
	if src, err := os.ReadFile(cl.Torchrun.TrainingScript); err == nil && !cl.Torchrun.NoPython {
		across = append(across, preflight.LintScript(cl.Torchrun.TrainingScript, src)...)
	}
	return preflight.NewReport(reports, across)
}

// showProgress counts nodes as their checks finish, on a terminal only and
// when there are enough nodes for the wait to be noticed.
func showProgress(w io.Writer, total int, done <-chan struct{}) {
	tty := isTerminal(w)
	for k := 1; k <= total; k++ {
		<-done
		if tty && total >= 4 {
			fmt.Fprintf(w, "\rpreflight: %d/%d nodes checked", k, total)
			if k == total {
				fmt.Fprint(w, "\r\x1b[K")
			}
		}
	}
}

// masterAddress is the address the nodes will reach the master at: the
// user's --master-addr when given, else the address the head reached node 0
// at. Each node reports the interface that routes there, and, when node 0
// was reached over SSH, proves it with a TCP connection to node 0's sshd
// (probePort). "" in local mode.
func masterAddress(cl envplan.CommandLine, hosts []envplan.Host, runners map[string]sshexec.Runner) (addr string, probePort int) {
	if len(hosts) == 0 {
		return "", 0
	}
	r, remote := runners[hosts[0].Name].(*sshexec.Remote)
	var host, port string
	if remote {
		host, port, _ = net.SplitHostPort(r.Addr())
	}
	probePort, _ = strconv.Atoi(port)
	switch {
	case cl.Set("master_addr"):
		return cl.Torchrun.MasterAddr, 0
	case host != "":
		return host, probePort
	}
	return hosts[0].Name, 0
}

// collectRequest tells a node's collector what to look at: the torchrun it
// will run (to find the Python and torch behind it), the training script
// (hashed, to compare across nodes) and the master address to route to.
// It travels as JSON to `gorun _collect` on remote nodes.
type collectRequest struct {
	Torchrun  string `json:"torchrun"`
	Script    string `json:"script"`
	RouteTo   string `json:"route_to"`
	ProbePort int    `json:"probe_port"`
}

// collectOn gathers one node's facts: in-process for the head, through the
// uploaded gorun (`gorun _collect REQUEST`) elsewhere.
func collectOn(ctx context.Context, r sshexec.Runner, req collectRequest) (preflight.Facts, error) {
	if _, ok := r.(*sshexec.Local); ok {
		return collectLocal(ctx, req), nil
	}
	remote, ok := r.(*sshexec.Remote)
	if !ok {
		return preflight.Facts{}, fmt.Errorf("no collector for %T", r)
	}
	arg, _ := json.Marshal(req)
	out, err := remote.AgentOutput(ctx, "_collect", string(arg))
	if err != nil {
		return preflight.Facts{}, err
	}
	var facts preflight.Facts
	if err := json.Unmarshal(out, &facts); err != nil {
		return preflight.Facts{}, fmt.Errorf("read facts from %s: %w", r.Node(), err)
	}
	return facts, nil
}

// collectLocal gathers this machine's facts. NVML is loaded here, in main,
// and only here.
func collectLocal(ctx context.Context, req collectRequest) preflight.Facts {
	src := preflight.Sources{
		NVML:       nvml.New(),
		Root:       "/",
		Run:        runCommand,
		Environ:    os.Environ(),
		Now:        time.Now,
		Interfaces: preflight.HostInterfaces,
		Route:      preflight.HostRoute,
		Torch: func(ctx context.Context) preflight.TorchFacts {
			return preflight.FindTorch(ctx, torchrunPython(req.Torchrun), runArgv, os.ReadFile)
		},
	}
	facts := preflight.Collect(ctx, src, preflight.CollectOptions{Script: req.Script, RouteTarget: req.RouteTo, ProbePort: req.ProbePort})
	facts.Gorun, _ = os.Executable()
	return facts
}

// torchrunPython is the interpreter torchrun runs under (its #! line).
func torchrunPython(torchrun string) string {
	prog := "torchrun"
	if f := strings.Fields(torchrun); len(f) > 0 {
		prog = f[0]
	}
	if p, err := exec.LookPath(prog); err == nil {
		prog = p
	}
	py := preflight.TorchrunPython(prog, os.ReadFile)
	if py == "" {
		py = "python3"
	}
	if p, err := exec.LookPath(py); err == nil {
		py = p
	}
	return py
}

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).Output()
}

func runArgv(ctx context.Context, argv []string) ([]byte, error) {
	return runCommand(ctx, argv[0], argv[1:]...)
}

func hasWarnings(r preflight.Report) bool {
	for _, n := range append([]preflight.NodeReport{{Findings: r.Findings}}, r.Nodes...) {
		for _, f := range n.Findings {
			if f.Severity == preflight.SeverityWarn {
				return true
			}
		}
	}
	return false
}

// planFacts reduces preflight facts to what the plan needs.
func planFacts(r preflight.Report) envplan.Facts {
	facts := make(envplan.Facts, len(r.Nodes))
	for _, n := range r.Nodes {
		f := n.Facts
		nf := envplan.NodeFacts{Hostname: f.Hostname, CPUs: f.CPUsAllowed, Gorun: f.Gorun, Python: f.Torch.Python}
		for _, g := range f.GPUs {
			nf.GPUs = append(nf.GPUs, envplan.GPU{Index: g.Index, BusID: g.BusID, NUMANode: g.NUMANode, CPUs: g.LocalCPUs})
		}
		if f.Route != nil && f.Route.Err == "" {
			nf.Interface, nf.Address = f.Route.Interface, f.Route.Source
		}
		for _, p := range f.RDMA {
			if p.State == "ACTIVE" {
				nf.IBPorts = append(nf.IBPorts, p.Name())
			}
		}
		facts[n.Host] = nf
	}
	return facts
}
