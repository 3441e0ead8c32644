package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/sshexec"
)

// Transport is how the head reaches the nodes.
type Transport int

const (
	// TransportLocal: one node, this machine (no --hosts, no allocation).
	TransportLocal Transport = iota
	// TransportSSH: the head itself locally, every other node over SSH.
	TransportSSH
	// TransportSrun: every node as job steps of the Slurm allocation.
	TransportSrun
	// TransportPod: this machine only, as one node of several that
	// something else started, one gorun each (a Kubernetes pod per node):
	// no host list, no Slurm step, and more than one node or a node rank.
	TransportPod
)

func (t Transport) String() string {
	switch t {
	case TransportSSH:
		return "ssh"
	case TransportSrun:
		return "srun"
	case TransportPod:
		return "pod"
	default:
		return "local"
	}
}

// chooseTransport reads --launcher: auto picks srun inside a Slurm
// allocation whose nodes are the job's (no --hosts or --hostfile) when srun
// is on the PATH; --launcher srun outside an allocation, or without srun,
// is refused before anything starts. Without a host list, more than one
// node or a node rank (on argv or in PET_NNODES / PET_NODE_RANK, as
// Kubeflow sets them) makes this gorun one pod's torchrun, except in a
// Slurm step, whose per-node gorun stays local mode.
func chooseTransport(cl cmdline.CommandLine, nodes []hosts.Host, cfg Config) (Transport, error) {
	o := cl.Gorun
	if len(nodes) == 0 && o.Launcher != "srun" {
		if perPod(cl) && !hosts.SlurmStep(cfg.Getenv) {
			return TransportPod, nil
		}
		return TransportLocal, nil
	}
	_, lookErr := cfg.LookPath("srun")
	inAllocation := cfg.Getenv("SLURM_JOB_ID") != ""
	switch o.Launcher {
	case "ssh":
		return TransportSSH, nil
	case "srun":
		switch {
		case !inAllocation:
			return 0, &userr.InputError{Where: "--launcher srun", Problem: "gorun is not inside a Slurm allocation (SLURM_JOB_ID is not set)",
				Fix: "run gorun from an sbatch script or an salloc shell, or use --launcher ssh"}
		case lookErr != nil:
			return 0, &userr.InputError{Where: "--launcher srun", Problem: "srun is not on the PATH",
				Fix: "add Slurm's bin directory to PATH, or use --launcher ssh"}
		case len(nodes) == 0:
			return TransportLocal, nil
		}
		return TransportSrun, nil
	}
	if o.Hosts == "" && o.Hostfile == "" && inAllocation && lookErr == nil {
		return TransportSrun, nil
	}
	return TransportSSH, nil
}

// Connect returns one runner per host: Local in local mode; srun steps for
// every node inside a Slurm allocation; else Local for the head itself and
// SSH for the rest, dialled in parallel. On any failure every connection
// is closed and the error names each failing host.
func Connect(ctx context.Context, cl cmdline.CommandLine, nodes []hosts.Host, cfg Config, ui UI) (map[string]sshexec.Runner, error) {
	t, err := chooseTransport(cl, nodes, cfg)
	if err != nil {
		return nil, err
	}
	switch t {
	case TransportLocal, TransportPod:
		return map[string]sshexec.Runner{"localhost": sshexec.NewLocal(cfg.Self)}, nil
	case TransportSrun:
		return connectSrun(ctx, cl.Gorun, nodes, cfg.Self)
	}
	return connectSSH(ctx, cl.Gorun, nodes, cfg.Self, ui)
}

func connectSSH(ctx context.Context, o cmdline.Options, nodes []hosts.Host, self string, ui UI) (map[string]sshexec.Runner, error) {
	diag := ui.Err
	sc := sshexec.Config{
		User: o.SSHUser, Port: o.SSHPort, Identity: o.SSHIdentity,
		SSHConfigFile: o.SSHConfig, KnownHosts: o.KnownHosts,
		AcceptNew: o.SSHAcceptNew, RemoteGorun: o.RemoteGorun,
		SSHCommand: sshCommand(o.SSHCommand),
		Warn:       func(m string) { fmt.Fprintln(diag, "gorun: warning:", m) },
	}
	runners := make(map[string]sshexec.Runner)
	var remote []string
	for _, h := range nodes {
		if sshexec.IsLocalHost(h.Name) {
			runners[h.Name] = sshexec.NewLocal(self)
		} else {
			remote = append(remote, h.Name)
		}
	}
	if len(remote) == 0 {
		return runners, nil
	}
	if err := checkFileLimit(len(remote), 1, "over SSH", "one connection each", openFileLimit()); err != nil {
		return nil, err
	}
	// The files and keys ssh would refuse, refused before any connection.
	if err := sc.Check(ctx); err != nil {
		return nil, fmt.Errorf("%w:\n%w", ErrSSHSettings, err)
	}
	if sc.RemoteGorun == "" {
		// Hashed once: every node runs the same content-addressed copy,
		// uploaded on first use where it is missing.
		var err error
		if sc.Agent, err = sshexec.HashBinary(self); err != nil {
			return nil, fmt.Errorf("read the gorun binary: %w", err)
		}
		sc.Others = otherBuilds(self, sc.Agent.Arch)
	}
	progress := startProgress(ui, "connecting", "reached", len(remote))
	sc.Dialled = progress.set
	dialled, err := sshexec.DialAll(ctx, remote, sc, o.Fanout)
	progress.end()
	for name, r := range dialled {
		runners[name] = r
	}
	if err != nil {
		closeAll(runners)
		return nil, fmt.Errorf("%w:\n%w", ErrUnreachable, err)
	}
	return runners, nil
}

// connectSrun returns a runner per node of the allocation, each starting
// its commands as job steps on its node. gorun reaches the nodes through
// the shared filesystem, else through sbcast (sshexec.PlaceSrunAgent),
// unless --remote-gorun names it.
func connectSrun(ctx context.Context, o cmdline.Options, nodes []hosts.Host, self string) (map[string]sshexec.Runner, error) {
	if err := checkFileLimit(len(nodes), 3, "through srun", "each node's agent step holds 3 pipes", openFileLimit()); err != nil {
		return nil, err
	}
	path := o.RemoteGorun
	if path == "" {
		bin, err := sshexec.HashBinary(self)
		if err != nil {
			return nil, fmt.Errorf("read the gorun binary: %w", err)
		}
		if path, err = sshexec.PlaceSrunAgent(ctx, hostNames(nodes), bin); err != nil {
			return nil, fmt.Errorf("%w:\n%w", ErrUnreachable, err)
		}
	}
	runners := make(map[string]sshexec.Runner, len(nodes))
	for _, h := range nodes {
		runners[h.Name] = sshexec.NewSrun(h.Name, path)
	}
	return runners, nil
}

func closeAll(runners map[string]sshexec.Runner) {
	for _, r := range runners {
		r.Close()
	}
}

func hostNames(nodes []hosts.Host) []string {
	names := make([]string, len(nodes))
	for i, h := range nodes {
		names[i] = h.Name
	}
	return names
}

// filesBesideNodes is what the head keeps open beside one connection per
// node: its standard streams, the local node's pipes and its agent's,
// the Go runtime's poller, NVML, the output files.
const filesBesideNodes = 64

// openFileLimit is RLIMIT_NOFILE's soft limit (which Go raised to the
// hard one at start); 0 when it cannot be read.
func openFileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}

// checkFileLimit refuses, before any connection, a node count whose
// connections (perNode files each, as each says) would run the head out
// of file descriptors (limit, 0: unknown) midway through the launch.
func checkFileLimit(nodes, perNode int, how, each string, limit uint64) error {
	need := uint64(nodes*perNode) + filesBesideNodes
	if limit == 0 || need <= limit {
		return nil
	}
	return &userr.InputError{Where: "the host list",
		Problem: fmt.Sprintf("%d nodes %s need about %d open files (%s, and %d for the head itself), but this process may open only %d (RLIMIT_NOFILE)",
			nodes, how, need, each, filesBesideNodes, limit),
		Fix: fmt.Sprintf("raise the limit before gorun starts (ulimit -n %d, or nofile in /etc/security/limits.conf for the user), or launch on fewer nodes", need)}
}

// unreachedHosts names the nodes a failed Connect could not reach (each
// *sshexec.HostError in err), sorted.
func unreachedHosts(err error) []string {
	var names []string
	var walk func(error)
	walk = func(err error) {
		var he *sshexec.HostError
		switch e := err.(type) {
		case nil:
			return
		case interface{ WrappedErrors() []error }: // go-multierror
			for _, w := range e.WrappedErrors() {
				walk(w)
			}
			return
		case interface{ Unwrap() []error }:
			for _, w := range e.Unwrap() {
				walk(w)
			}
			return
		}
		if errors.As(err, &he) {
			names = append(names, he.Host)
			return
		}
		walk(errors.Unwrap(err))
	}
	walk(err)
	slices.Sort(names)
	return slices.Compact(names)
}

// otherBuilds are builds of this gorun for the other architectures a
// release ships (amd64, arm64), each where one is found: beside this
// binary as gorun-linux-ARCH (a release's binaries side by side), else in
// the user's cache as ~/.cache/gorun/gorun-linux-ARCH. A file there that
// is not an ELF binary for its architecture is left out.
func otherBuilds(self, own string) []sshexec.Binary {
	var dirs []string
	if self != "" {
		dirs = append(dirs, filepath.Dir(self))
	}
	if cache, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(cache, "gorun"))
	}
	var out []sshexec.Binary
	for _, arch := range []string{"amd64", "arm64"} {
		if arch == own {
			continue
		}
		for _, d := range dirs {
			b, err := sshexec.HashBinary(filepath.Join(d, "gorun-linux-"+arch))
			if err == nil && b.Arch == arch {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

// sshCommand is --ssh-command's words (nil: Go's client), split at spaces
// as a command line without quotes.
func sshCommand(flag string) []string {
	if flag == "" {
		return nil
	}
	return append([]string{}, strings.Fields(flag)...)
}
