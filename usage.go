package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/userr"
	"github.com/urfave/cli/v2"
)

// usageError turns urfave/cli's complaint about a subcommand's options
// into an input error (exit 2) that says how the command is used.
func usageError(where, fix string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return &userr.InputError{Where: where, Problem: err.Error(), Fix: fix}
	}
}

// noArguments refuses an argument given to a subcommand that takes none.
func noArguments(where, arg string) error {
	return &userr.InputError{Where: where, Problem: fmt.Sprintf("takes no arguments, and %q was given", arg),
		Fix: "give options only; " + where + " --help lists them"}
}

// usage is `gorun --help`: torchrun's command line plus gorun's options.
func usage() string {
	var b strings.Builder
	b.WriteString(`usage: gorun [gorun options] [torchrun options] training_script [script args...]
       gorun preflight [--json] [--bandwidth node|all] [--topo-file FILE] [gorun options] [torchrun options] [script]
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
  --preflight-bandwidth off|node|all
                           preflight also moves real bytes: GPU pairs, host
                           links, all_reduce per node (node) and between
                           nodes (all); see gorun preflight --help
  --launcher auto|ssh|srun how to reach the nodes; auto: srun inside a Slurm
                           allocation (its own nodes), ssh otherwise
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
  --telemetry-interval D   sample every node's GPUs this often while the job
                           runs: status line, stragglers named (default 1s; 0: off)
  --telemetry FILE         every GPU sample as JSON Lines (pandas.read_json(lines=True))
  --report FILE.html       one self-contained HTML report at the end: per-GPU
                           timelines, attempts and failures, preflight, plan

torchrun options (torchrun --help explains them; dash or underscore spelling):
`)
	line := " "
	for _, name := range cmdline.TorchrunOptionNames() {
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
