package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/buildinfo"
	"github.com/gorun/gorun/internal/userr"
)

// hostsUsage is `gorun hosts --help`.
const hostsUsage = `usage: gorun hosts [--hosts LIST | --hostfile FILE] [--include|--exclude SPEC] [--json]

Prints the host list a launch would use, in launch order: from --hosts,
from a DeepSpeed or MPI hostfile, or from the Slurm allocation gorun runs
in, after --include or --exclude. Nothing is contacted.

  --hosts h1:8,h2:8        nodes and their GPU slots
  --hostfile FILE          DeepSpeed (host slots=N) or MPI (host[:N]) hostfile
  --include/--exclude SPEC DeepSpeed filter: host1:0,2@host2 (not both)
  --json                   print JSON
`

// versionUsage is `gorun version --help`.
const versionUsage = `usage: gorun version

Prints gorun's version and the commit it was built from, the Go version,
the platform, and the oldest glibc this binary starts on (read from its
own dynamic symbols). gorun --version prints the same.
`

// helpTopic is the text `gorun help COMMAND` prints, "" for no such
// command.
func helpTopic(command string) string {
	switch command {
	case "preflight":
		return preflightUsage
	case "hosts":
		return hostsUsage
	case "version":
		return versionUsage
	case "help":
		return usage()
	}
	return ""
}

// runHelp is `gorun help [COMMAND]`.
func runHelp(args []string, w io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		_, err := io.WriteString(w, usage())
		return err
	}
	text := helpTopic(args[0])
	if text == "" || len(args) > 1 {
		return &userr.InputError{Where: "gorun help " + strings.Join(args, " "),
			Problem: "takes one command name: preflight, hosts or version",
			Fix:     "gorun help lists the options of a launch; gorun help preflight, hosts or version explains that command"}
	}
	_, err := io.WriteString(w, text)
	return err
}

// runVersion is `gorun version`.
func runVersion(args []string, w io.Writer) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" {
			_, err := io.WriteString(w, versionUsage)
			return err
		}
		return &userr.InputError{Where: "gorun version", Problem: fmt.Sprintf("takes no options and no arguments, and %q was given", args[0]),
			Fix: "run gorun version alone; gorun version --help says what it prints"}
	}
	_, err := io.WriteString(w, buildinfo.Describe())
	return err
}

// usage is `gorun --help`: torchrun's command line plus gorun's options.
func usage() string {
	var b strings.Builder
	b.WriteString(`usage: gorun [gorun options] [torchrun options] training_script [script args...]
       gorun preflight [--json] [--bandwidth node|all] [--topo-file FILE] [gorun options] [torchrun options] [script]
       gorun hosts [--hosts LIST | --hostfile FILE] [--include|--exclude SPEC] [--json]
       gorun version
       gorun help [preflight|hosts|version]

A drop-in replacement for torchrun: the same options, plus launch on every
node from this one, preflight checks, a plan with a reason for every
variable, and whole-group supervision. Without --hosts, --hostfile or a
Slurm allocation it runs torchrun here, as torchrun would.

gorun options:
  --hosts h1:8,h2:8        nodes and their GPU slots, in launch order
  --hostfile FILE          DeepSpeed (host slots=N) or MPI (host[:N]) hostfile
  --include/--exclude SPEC DeepSpeed filter: host1:0,2@host2 (not both)
  --env KEY=VALUE, --env KEY
                           set a variable on every node (repeatable; wins); KEY alone
                           takes this shell's value, never shown (a token off the command line)
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
  --ssh-command "ssh [OPTIONS]"
                           reach the nodes with the system's ssh client
                           (Kerberos, hostbased, tokens, ProxyCommand: what
                           "ssh node" does) instead of gorun's own; one
                           login per node, BatchMode, host keys checked
  --remote-gorun PATH      use this gorun on the nodes instead of uploading it
  --fanout N               nodes dialled, checked or started at once (default
                           32; behind a jump host, under its sshd's MaxStartups)
  --hang-timeout DURATION  no progress from any worker for this long is a hang:
                           stacks printed, attempt failed (default 30m; 0: off;
                           at least 5s); auto: 5 x the longest silence earlier
                           runs of the script had (30m until one succeeded),
                           and no training step for 5 x the longest span
                           without one (at least twice that) while they print
  --hang-timeout-floor D   the shortest limit auto may choose (default 10m)
  --flight-recorder DIR    PyTorch's NCCL flight recorder in every worker;
                           every rank's dump gathered under DIR on a failure
  --telemetry-interval D   sample every node's GPUs this often while the job
                           runs: status line, stragglers named (default 1s; 0: off)
  --telemetry FILE         every GPU sample as JSON Lines (pandas.read_json(lines=True))
  --report FILE.html       one self-contained HTML report at the end: per-GPU
                           timelines, attempts and failures, preflight, plan
  --summary FILE.json      the run as JSON at the end, whatever its end: outcome,
                           each attempt's failure, each restart's phases in ms
  --warm-restart on|early|off
                           start each node's next torchrun ahead, its imports
                           done, while an attempt runs, and hand it the first
                           restart's command line then, its workers held at a
                           gate (default on: once the workers are past their
                           imports, or with the attempt on nodes with CPUs to
                           spare; early: with the attempt on every node)
  --stop-grace DURATION    after SIGTERM or Ctrl-C to gorun, the workers' time to
                           save their state before SIGKILL (default 30s)
  --shutdown-timeout N     torchrun 2.12's name for it, in seconds (and its
                           TORCH_ELASTIC_SHUTDOWN_TIMEOUT); --stop-grace wins
                           over both, the flag over the variable
  --prewarm auto|MODULES|off
                           a pool of worker interpreters per node, forked
                           from one that imported MODULES (such as torch)
                           ahead; auto: torch, for a script that imports it,
                           on nodes with a CPU to spare (default auto;
                           off: none)
  --timestamps             gorun's own lines begin with the time (RFC 3339,
                           milliseconds): 2026-12-06T21:40:01.123Z (UTC)
  --worker-timestamps      so do the workers' and torchrun's lines
  --step-pattern REGEX     a training step in a worker's line, by its group
                           (?P<step>N) (default: "step N", "iter N", tqdm's
                           "N/M [", as plain prints, Lightning and the HF
                           Trainer print them); off: none. The last line says
                           the goodput: productive steps over wall time, the
                           rest by cause; --summary has it in full
  --checkpoint-pattern RE  a saved checkpoint in a worker's line (default: a
                           line saying a checkpoint was saved or written); a
                           touch of $GORUN_CHECKPOINT_FILE says one too

Worker lines begin with [NODE LOCAL_RANK rGLOBAL_RANK] ("[node1 3 r11]"), or
with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE filled in as torchrun fills it
(${role_name} ${rank} ${local_rank} ${pid}, and ${node} ${hostname}); on one
local node, as torchrun prints them (with --tee, its "[default0]:").

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT reach every worker once, as
themselves, and stop the job (a second one kills at once); SIGUSR1, SIGUSR2
and --signals-to-handle's SIGALRM, SIGXCPU, SIGPWR reach every worker once and
stop nothing.

Exit codes: 0 success; the failing worker's own code (128+N for signal N);
2 bad input, never worth a retry (a preflight failure of what the job asks or
brings included; nothing started); 3 a node unreachable or unhealthy (failed
preflight or a recheck before a restart, kept GPU memory): retry elsewhere;
124 a hang; 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM); 1 anything
else (an output file not written included).

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
