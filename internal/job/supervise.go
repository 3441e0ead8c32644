package job

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/cpuset"
	"github.com/gorun/gorun/internal/stepscan"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/sshexec"
)

// The pauses between attempts (launch.Options.Backoff): none before the
// first restart after a worker's failure (a fresh master port, when the
// old one is still held, leaves nothing to wait for), 1 s before the
// second and after a lost node, doubling up to 30 s, so a job that fails
// over and over does not hammer its nodes or their shared filesystem.
const (
	restartBackoff    = time.Second
	restartBackoffMax = 30 * time.Second
)

// supervise runs the plan's attempts under launch.Run, with the hooks
// between them, and then the hooks' Finish. A job that succeeded but
// could not write an output it was asked for fails with an error
// wrapping ErrOutput.
func (r *run) supervise(ctx context.Context, plan envplan.Plan, hooks []Hook) error {
	a := &Attempt{Spec: r.spec, Plan: plan}
	opts := launch.Options{
		Attempt: func(ctx context.Context, k int, rs *launch.Restart) ([]launch.Node, error) {
			a.K, a.Nodes, a.Restart, a.Replaced = k, nil, rs, nil
			if err := beforeAttempt(ctx, hooks, a); err != nil {
				return nil, err
			}
			a.Nodes = jobs(a.Plan, r.conns, k, r.jobSettings())
			if n := len(a.Nodes); n > 0 {
				a.Nodes[n-1].Standby = r.spares.runners(r.conns) // a spare takes any node's job as it is handed over
			}
			shape(hooks, a)
			starting(hooks, a)
			return a.Nodes, nil
		},
		Ahead:       r.ahead(hooks, a),
		Failed:      func(k int, f launch.Failure) { attemptFailed(hooks, k, f) },
		Stopping:    func(ctx context.Context, _ int) { stopping(ctx, hooks, a) }, // a is attempt k still
		MaxRestarts: r.cl.Torchrun.MaxRestarts,                                    // gorun restarts the whole group; each torchrun runs with 0
		Backoff:     restartBackoff,
		BackoffMax:  restartBackoffMax,
		HangTimeout: r.cl.Gorun.HangTimeout,
		LocalRanks:  localRanks(r.cl.Torchrun.LocalRanksFilter),
		Out:         r.ui.Out,
		Err:         r.ui.lines(),
		Diag:        r.ui.Err,
		Plain:       len(r.spec.Hosts) == 0, // one local node: print exactly what torchrun prints
		Color:       r.ui.Color,
		Prefix:      r.prefix(plan),
		Kill:        r.ui.Kill,
		StopGrace:   r.cl.Gorun.StopGrace,
		Signals:     r.ui.Signals,
		Resize:      r.ui.Resize,
	}
	// Each start runs the user's shell and its rc files on the node; all
	// at once they can queue on one lock (pyenv's rehash in a shared
	// home: 75 s for 200 nodes, against 35 s 32 at a time). A warm start
	// opens no session, so restarts do not wait for waves.
	opts.Fanout = cmp.Or(r.cl.Gorun.Fanout, cmdline.DefaultFanout)
	configure(hooks, &opts)
	res, err := launch.Run(ctx, opts)
	// The hooks finish after a stop too (the last dumps, the report), but
	// not after a second Ctrl-C.
	fctx, cancel := killContext(context.WithoutCancel(ctx), r.ui.Kill)
	defer cancel()
	ferr := finish(fctx, hooks, a, res, err)
	switch {
	case ferr == nil:
		return err
	case err == nil:
		return ferr // the job succeeded; the exit says what was not written
	default:
		fmt.Fprintln(r.ui.Err, "gorun:", userr.Printable(ferr.Error()))
		return err
	}
}

// steps is how each worker's supervisor recognises training steps and
// checkpoints in its output: the user's patterns (checked as they were
// parsed) or stepscan's defaults.
func steps(o cmdline.Options) stepscan.Patterns {
	st := stepscan.Patterns{Off: o.StepsOff()}
	if o.StepPattern != "" && !st.Off {
		st.Step = regexp.MustCompile(o.StepPattern)
	}
	if o.CheckpointPattern != "" {
		st.Checkpoint = regexp.MustCompile(o.CheckpointPattern)
	}
	return st
}

// prefix says how the workers' lines are marked: torchrun's template
// where the user set one (exported, which every node's torchrun gets
// too, or with --env), its --role and --tee, and --worker-timestamps.
func (r *run) prefix(plan envplan.Plan) launch.Prefix {
	p := launch.Prefix{Template: r.cfg.Getenv(envplan.PrefixTemplateVar), Role: r.cl.Torchrun.Role, Stamp: r.cl.Gorun.WorkerTimestamps}
	if len(plan.Nodes) > 0 {
		if v, ok := plan.Nodes[0].Env[envplan.PrefixTemplateVar]; ok {
			p.Template = v.Value
		}
	}
	if tee := r.cl.Torchrun.Tee; r.cl.Set("tee") {
		p.Tee = func(lr int) int { return wire.StdStreams(tee, lr) }
	}
	return p
}

// ahead is launch.Options.Ahead for this run: attempt k+1's jobs as its
// Attempt makes them when no hook changes the plan, on a store port of
// their own (masterPort.ahead); nil where the next torchrun has no
// standby to start on, or its store port is not gorun's to move: an
// endpoint the user gave, a port the user gave for several nodes (a
// firewall may open only that one; on one local node the port is on
// loopback and moves), or another pod's.
func (r *run) ahead(hooks []Hook, a *Attempt) func(ctx context.Context, k int) []launch.Node {
	local := len(r.spec.Hosts) == 0
	if r.cl.Gorun.WarmRestart == "off" || r.cl.Set("rdzv_endpoint") || (r.cl.Set("master_port") && !local) {
		return nil
	}
	var mp *masterPort
	for _, h := range hooks {
		if m, ok := h.(*masterPort); ok {
			mp = m
		}
	}
	if mp == nil {
		return nil
	}
	return func(ctx context.Context, k int) []launch.Node {
		plan, ok := mp.ahead(ctx, a.Plan, k)
		if !ok {
			return nil
		}
		next := &Attempt{K: k + 1, Spec: a.Spec, Plan: plan}
		next.Nodes = jobs(plan, r.conns, k+1, r.jobSettings())
		shape(hooks, next)
		return next.Nodes
	}
}

// firstJobs are the first attempt's jobs for starting its torchrun ahead
// on every node while preflight runs (launch.WarmFirst): most of a
// torchrun's start is its import of torch, and a worker the pool cannot
// serve (a script that must start cold) then waits for its own import
// only, as under torchrun. They are those of a plan made without
// preflight's facts: where the facts change a variable read at import,
// the first attempt starts cold, as it did before. Nil: none
// (--warm-restart off), and none over ssh: gorun goes to a node only
// once preflight has found a build that fits it.
func (r *run) firstJobs() []launch.Node {
	if r.cl.Gorun.WarmRestart == "off" || (len(r.spec.Hosts) > 0 && !r.perPod) {
		return nil
	}
	plan, err := envplan.Build(r.spec, nil)
	if err != nil {
		return nil // said once the plan is made with the facts
	}
	return jobs(plan, r.conns, 0, r.jobSettings())
}

// killContext ends when parent does or kill is closed.
func killContext(parent context.Context, kill <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if kill != nil {
		go func() {
			select {
			case <-kill:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// torchrunModule is what a warm torchrun imports ahead: torchrun's own
// module, and torch with it.
const torchrunModule = "torch.distributed.run"

// jobs turns the plan into one job per node for attempt k; runID marks
// every process of the job (wire.RunIDVar: the teardown check before a
// restart knows them by it); warm asks for the next attempt's torchrun to
// be started ahead (launch.Node.Workers).
func jobs(plan envplan.Plan, runners map[string]sshexec.Runner, k int, js jobSettings) []launch.Node {
	nodes := make([]launch.Node, 0, len(plan.Nodes))
	store, haveStore := plan.StoreAddr()
	for i, n := range plan.Nodes {
		env := make(map[string]string, len(n.Env)+2)
		for name, v := range n.Env {
			if v.Source != envplan.SourceTorchrun {
				env[name] = v.Value
			}
		}
		env[wire.RestartCountVar] = strconv.Itoa(k)
		env[wire.MaxRestartsVar] = strconv.Itoa(js.maxRestarts)
		if js.merged {
			env[wire.MergedOutputVar] = "1"
		}
		if js.tty != "" {
			env[wire.TTYVar] = js.tty
		}
		if js.steps != "" {
			env[wire.StepsVar] = js.steps
		}
		if js.runID != "" {
			env[wire.RunIDVar] = js.runID
		}
		if js.logDir != "" {
			env[wire.LogDirVar] = js.logDir
		}
		argv := slices.Clone(n.Command)
		for i, a := range argv {
			if a == wire.SelfArg {
				argv[i] = wire.SelfArg // the node's agent knows where its gorun is
			}
		}
		job := wire.Job{Argv: argv, Env: env, Dir: js.dir, StopGrace: js.stopGrace, PassSignals: js.pass, Stdin: js.stdin}
		if js.warm {
			job.Preimport = []string{torchrunModule}
			if gpus, known := js.gpus[n.Host]; !known || gpus > 0 {
				// The teardown check before the restart asks the standby;
				// started ahead, it has NVML loaded by then.
				job.AskAhead = []string{wire.GPUFreeCommand}
			}
			if haveStore && i > 0 {
				// Handed over at the same moment, the other nodes' torchruns
				// would reach node 0's store before it listens, and wait out
				// the store client's one-second retry.
				job.WaitFor = store
			}
		}
		if len(js.prewarm) > 0 {
			job.Pool = workerPool(n, js.prewarm)
			job.Pool.Auto = js.prewarmAuto
		}
		nodes = append(nodes, launch.Node{
			Name:      n.Host,
			Runner:    runners[n.Host],
			Job:       job,
			Workers:   len(n.Ranks),
			WarmEarly: js.warm && (js.early || warmEarly(js.cpus[n.Host], len(n.Ranks), job.Pool != nil)),
		})
	}
	return nodes
}

// warmEarly reports whether a node with cpus CPUs (0: not known) has room
// for the next attempt's standby torchrun, and its worker pool, to import
// while the attempt's own torchrun and workers (or pool) import theirs,
// without slowing them: a CPU for each worker, for the standby, for the
// pool's import (one for all its interpreters, which it forks) and one
// more for torchrun and the agent. Then the standby starts with the
// attempt (launch.Node.WarmEarly), and a crash during start-up restarts
// warm.
func warmEarly(cpus, workers int, pool bool) bool {
	need := workers + 1 + 1
	if pool {
		need++
	}
	return cpus > 0 && workers > 0 && cpus >= need
}

// workerPool asks node n's agent for one interpreter per local rank,
// importing modules ahead: each with its rank's CPUs and the variables
// torchrun and `gorun _rank` give every worker when unset, so that the
// worker finds its interpreter started as it would have started it.
func workerPool(n envplan.NodePlan, modules []string) *wire.Pool {
	def := map[string]string{"PYTHONFAULTHANDLER": "1"} // `gorun _rank`'s
	if v, ok := n.Env["OMP_NUM_THREADS"]; ok && v.Source == envplan.SourceTorchrun {
		def["OMP_NUM_THREADS"] = v.Value // torchrun's, for nproc_per_node > 1
	}
	var sets []string
	if v, ok := n.Env[wire.RankCPUsVar]; ok {
		sets = strings.Split(v.Value, ";")
	}
	p := &wire.Pool{
		Modules: modules,
		// what torchrun sets for each worker, which no module reads at import
		Late: []string{"TORCHELASTIC_*", "TORCH_NCCL_ASYNC_ERROR_HANDLING"},
	}
	p.Worker, p.Module = workerScript(n.Command)
	for i := range n.Ranks {
		s := wire.PoolSlot{Default: def}
		if i < len(sets) {
			s.CPUs, _ = cpuset.Parse(sets[i]) // the plan made it; `gorun _rank` says what is wrong with it
		}
		p.Slots = append(p.Slots, s)
	}
	return p
}

// workerScript is what each worker of cmd (torchrun's argv, its workers
// started by `gorun _rank [-m] -- SCRIPT ARGS`) runs: the script or the
// module (-m) and its arguments; none where the workers are not Python.
func workerScript(cmd []string) (worker []string, module bool) {
	i := slices.Index(cmd, wire.RankCommand)
	if i < 0 {
		return nil, false
	}
	for _, a := range cmd[i+1:] {
		i++
		switch a {
		case "-m":
			module = true
		case "--no-python":
			return nil, false
		case "--":
			return slices.Clone(cmd[i+1:]), module
		}
	}
	return nil, false
}

// jobSettings are what every node's job of a run shares.
type jobSettings struct {
	dir, runID  string
	logDir      string // --log-dir as given; "": not given (wire.LogDirVar)
	warm        bool
	early       bool     // --warm-restart early: the standby starts with the attempt on every node
	prewarm     []string // modules the worker pool imports; none: no pool
	prewarmAuto bool     // --prewarm auto: no pool where the node has too few CPUs (wire.Pool.Auto)
	merged      bool     // UI.Merged
	tty         string   // wire.TTYVar's value; "": no terminal
	steps       string   // wire.StepsVar's value; "": no steps read
	stdin       *os.File // local rank 0's stdin on a local node; nil: /dev/null
	stopGrace   time.Duration
	maxRestarts int   // the group's, which its workers see as torchrun's (wire.MaxRestartsVar)
	pass        []int // signals passed on to the workers (Job.PassSignals)
	// cpus and gpus are how many CPUs the job may use and how many GPUs
	// there are on each node, by host, as preflight found them (none:
	// not known).
	cpus, gpus map[string]int
}

func (r *run) jobSettings() jobSettings {
	js := jobSettings{dir: r.cfg.Dir, runID: r.cfg.RunID, warm: r.cl.Gorun.WarmRestart != "off", early: r.cl.Gorun.WarmRestart == "early", prewarm: r.cl.Gorun.Prewarm, prewarmAuto: r.cl.Gorun.PrewarmAuto, merged: r.ui.Merged,
		tty: wire.FormatTTY(r.ui.TTY), steps: steps(r.cl.Gorun).Encode(), stopGrace: r.cl.Gorun.StopGrace, maxRestarts: r.cl.Torchrun.MaxRestarts}
	if r.cl.Set("log_dir") && !r.cl.Torchrun.RunPath {
		js.logDir = r.cl.Torchrun.LogDir
	}
	if r.ui.Stdin != nil && len(r.spec.Hosts) == 0 { // local: over ssh and srun the workers read /dev/null
		if in, err := r.ui.Stdin(); err == nil {
			js.stdin = in
		} else {
			fmt.Fprintf(r.ui.Err, "gorun: the workers read no stdin: %v\n", err)
		}
	}
	for _, sig := range r.cl.Torchrun.PassSignals() {
		js.pass = append(js.pass, int(sig))
	}
	js.cpus, js.gpus = make(map[string]int, len(r.facts)), make(map[string]int, len(r.facts))
	for host, f := range r.facts {
		if cpus, err := cpuset.Parse(f.CPUs); err == nil {
			js.cpus[host] = len(cpus)
		}
		js.gpus[host] = len(f.GPUs)
	}
	return js
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
