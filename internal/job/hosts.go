package job

import (
	"fmt"
	"os"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/inputfile"
	"github.com/gorun/gorun/internal/userr"
)

// ResolveHosts reads the host list the options name (--hosts, --hostfile,
// a Slurm allocation, with --include/--exclude); none means local mode.
func ResolveHosts(o cmdline.Options, getenv func(string) string) ([]hosts.Host, error) {
	var data []byte
	if o.Hostfile != "" && o.Hosts == "" { // both: ResolveHosts says they exclude each other
		var err error
		if data, err = inputfile.Read(o.Hostfile, inputfile.DefaultMax); err != nil {
			return nil, &userr.InputError{Where: "--hostfile", Problem: err.Error(),
				Fix: "give the path of a readable hostfile"}
		}
	}
	return hosts.Resolve(o.Hosts, o.Hostfile, data, o.Include, o.Exclude, getenv)
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

// slurmStep is the command line of one task of `srun gorun` with a static
// rendezvous over several nodes: without --node-rank every torchrun would
// be node 0, so the task's SLURM_NODEID is its rank. Elsewhere it is the
// command line as parsed.
func slurmStep(cfg Config) (cmdline.CommandLine, error) {
	cl := cfg.CommandLine
	if !hosts.SlurmStep(cfg.Getenv) || cl.Set("node_rank") || cl.Torchrun.NNodesMax < 2 || cl.Torchrun.RdzvBackend != "static" {
		return cl, nil
	}
	id := cfg.Getenv("SLURM_NODEID")
	if id == "" {
		return cl, nil
	}
	return cmdline.ParseExtra(append([]string{"--node-rank=" + id}, cfg.Args...), cfg.Getenv, cl.Extra)
}
