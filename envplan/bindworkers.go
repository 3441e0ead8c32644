package envplan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/wire"
)

// PrefixTemplateVar is torchrun's template of the prefix of its --tee
// lines, which gorun's lines of the workers follow too.
const PrefixTemplateVar = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"

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
		self = wire.SelfArg
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
	argv = append(argv, self, wire.RankCommand)
	switch {
	case b.cfg.NoPython:
		argv = append(argv, "--no-python")
	case b.cfg.Module:
		argv = append(argv, "-m")
	}
	argv = append(argv, "--")
	n.Command = append(append(argv, b.cfg.TrainingScript), b.cfg.TrainingScriptArgs...)

	if b.spec.Set("tee") || b.spec.Set("redirects") {
		var echo, quiet []string
		for lr := range len(n.Ranks) {
			if e := wire.StdStreams(b.cfg.Redirects, lr) | wire.StdStreams(b.cfg.Tee, lr); e != 0 {
				echo = append(echo, fmt.Sprintf("%d:%d", lr, e))
			}
			if q := wire.StdStreams(b.cfg.Redirects, lr) &^ wire.StdStreams(b.cfg.Tee, lr); q != 0 {
				quiet = append(quiet, fmt.Sprintf("%d:%d", lr, q))
			}
		}
		if len(echo) > 0 {
			n.Env[wire.WorkerEchoVar] = Var{Value: strings.Join(echo, ","), Source: SourceGorun,
				Reason: "--tee/--redirects: each worker's supervisor also writes these streams where torchrun captures them, so torchrun's log files are written as without gorun"}
		}
		if len(quiet) > 0 {
			n.Env[wire.WorkerQuietVar] = Var{Value: strings.Join(quiet, ","), Source: SourceGorun,
				Reason: "--redirects: the streams torchrun sends to its log files only (and --tee does not copy back) stay off the console, as under torchrun"}
		}
	}
	sets := make([]string, len(n.Ranks))
	bound := false
	for i, r := range n.Ranks {
		sets[i] = r.CPUs
		bound = bound || r.CPUs != ""
	}
	if bound {
		n.Env[wire.RankCPUsVar] = Var{
			Value:  strings.Join(sets, ";"),
			Reason: "each local rank's CPUs (the ranks table), applied by `gorun _rank` to the worker it starts",
			Source: SourceGorun,
		}
	}
}
