package envplan

import (
	"slices"
	"strings"

	"github.com/gorun/gorun/hosts"
)

// RankCPUsVar carries each local rank's CPU set to the worker's supervisor:
// cpulists in local-rank order, separated by ';' ("0-11;12-23").
const RankCPUsVar = "GORUN_RANK_CPUS"

// RankCommand is the hidden gorun subcommand that supervises one worker.
const RankCommand = "_rank"

// GorunSelf stands for the node's own gorun in a command when its path is
// not known on the head (preflight off); the node agent replaces it.
const GorunSelf = "{gorun}"

// WorkerEchoVar set to 1 makes each worker's supervisor also write the
// worker's output where torchrun captures it (the user's --tee and
// --redirects files).
const WorkerEchoVar = "GORUN_WORKER_ECHO"

// wrapWorkers puts gorun's supervisor between torchrun and every worker:
// torchrun runs `gorun _rank [-m | --no-python] -- <script> <args>` (with
// --no_python), and the supervisor starts the interpreter torchrun itself
// runs under, as `<python> -u [-m] script args`, bound to LOCAL_RANK's CPUs,
// so the script sees the same argv, interpreter and environment as without
// gorun. The supervisor reports the worker's start, lines and exit to the
// node agent as they happen. Not possible with --run-path, where the script
// runs inside torchrun's own process tree.
func (b *builder) wrapWorkers(n *NodePlan, h hosts.Host) {
	if b.cfg.RunPath {
		return
	}
	self := b.facts[h.Name].Gorun
	if self == "" {
		self = GorunSelf
	}
	tail := 1 + len(b.cfg.TrainingScriptArgs) // the script and its args end the argv
	prog := max(1, len(strings.Fields(b.spec.Gorun.Torchrun)))
	// torchrun's options, after its own words ("python3 -m torch.distributed.run")
	opts := slices.DeleteFunc(slices.Clone(n.Command[prog:len(n.Command)-tail]), func(a string) bool {
		return a == "--module" || a == "-m" // the supervisor runs "python -m" itself
	})
	argv := append(slices.Clone(n.Command[:prog]), opts...)
	if !slices.Contains(argv, "--no_python") && !slices.Contains(argv, "--no-python") {
		argv = append(argv, "--no_python")
	}
	argv = append(argv, self, RankCommand)
	switch {
	case b.cfg.NoPython:
		argv = append(argv, "--no-python")
	case b.cfg.Module:
		argv = append(argv, "-m")
	}
	argv = append(argv, "--")
	n.Command = append(append(argv, b.cfg.TrainingScript), b.cfg.TrainingScriptArgs...)

	if b.spec.Set("tee") || b.spec.Set("redirects") {
		n.Env[WorkerEchoVar] = Var{Value: "1", Source: SourceGorun,
			Reason: "--tee/--redirects: each worker's supervisor also writes its output where torchrun captures it, so torchrun's log files are written as without gorun"}
	}
	sets := make([]string, len(n.Ranks))
	bound := false
	for i, r := range n.Ranks {
		sets[i] = r.CPUs
		bound = bound || r.CPUs != ""
	}
	if bound {
		n.Env[RankCPUsVar] = Var{
			Value:  strings.Join(sets, ";"),
			Reason: "each local rank's CPUs (the ranks table), applied by `gorun _rank` to the worker it starts",
			Source: SourceGorun,
		}
	}
}
