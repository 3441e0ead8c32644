package envplan

import (
	"slices"
	"strings"
)

// RankCPUsVar carries each local rank's CPU set to the worker-start hook:
// cpulists in local-rank order, separated by ';' ("0-11;12-23").
const RankCPUsVar = "GORUN_RANK_CPUS"

// RankCommand is the hidden gorun subcommand that starts one worker bound to
// its CPUs.
const RankCommand = "_rank"

// bindWorkers makes the planned CPU sets real. torchrun starts the workers,
// so the binding has to happen inside each worker's start: torchrun runs
// `gorun _rank -- <python> -u <script> <args>` (with --no-python), and the
// hook binds itself to LOCAL_RANK's CPUs, then execs the interpreter torchrun
// would have run, so the script sees the same argv, interpreter and
// environment as without gorun.
func (b *builder) bindWorkers(n *NodePlan, h Host) {
	f := b.facts[h.Name]
	tail := 1 + len(b.cfg.TrainingScriptArgs) // the script and its args end the argv
	argv := slices.DeleteFunc(slices.Clone(n.Command[:len(n.Command)-tail]), func(a string) bool {
		return a == "--module" || a == "-m" // the hook runs "python -m" itself
	})
	if !slices.Contains(argv, "--no_python") {
		argv = append(argv, "--no_python")
	}
	argv = append(argv, f.Gorun, RankCommand, "--")
	if !b.cfg.NoPython {
		argv = append(argv, f.Python, "-u") // what torchrun runs: sys.executable -u [-m] script
		if b.cfg.Module {
			argv = append(argv, "-m")
		}
	}
	n.Command = append(append(argv, b.cfg.TrainingScript), b.cfg.TrainingScriptArgs...)

	sets := make([]string, len(n.Ranks))
	for i, r := range n.Ranks {
		sets[i] = r.CPUs
	}
	n.Env[RankCPUsVar] = Var{
		Value:  strings.Join(sets, ";"),
		Reason: "each local rank's CPUs (the ranks table), applied by `gorun _rank` inside the worker's start before " + f.Python + " runs the script",
		Source: SourceGorun,
	}
}
