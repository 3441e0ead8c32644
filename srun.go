package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// useSrun says whether the head reaches the nodes through srun
// (--launcher): auto picks srun inside a Slurm allocation whose nodes are
// the job's (no --hosts or --hostfile) when srun is on the PATH.
func useSrun(o cmdline.Options, hosts []hosts.Host) (bool, error) {
	_, lookErr := exec.LookPath("srun")
	inAllocation := os.Getenv("SLURM_JOB_ID") != ""
	switch o.Launcher {
	case "ssh":
		return false, nil
	case "srun":
		switch {
		case !inAllocation:
			return false, &userr.InputError{Where: "--launcher srun", Problem: "gorun is not inside a Slurm allocation (SLURM_JOB_ID is not set)",
				Fix: "run gorun from an sbatch script or an salloc shell, or use --launcher ssh"}
		case lookErr != nil:
			return false, &userr.InputError{Where: "--launcher srun", Problem: "srun is not on the PATH",
				Fix: "add Slurm's bin directory to PATH, or use --launcher ssh"}
		}
		return len(hosts) > 0, nil
	}
	return len(hosts) > 0 && o.Hosts == "" && o.Hostfile == "" && inAllocation && lookErr == nil, nil
}

// connectSrun returns a runner per node of the allocation, each starting
// its commands as job steps on its node. gorun reaches the nodes through
// the shared filesystem, else through sbcast (sshexec.PlaceSrunAgent),
// unless --remote-gorun names it.
func connectSrun(ctx context.Context, cl cmdline.CommandLine, hosts []hosts.Host, self string) (map[string]sshexec.Runner, error) {
	path := cl.Gorun.RemoteGorun
	if path == "" {
		bin, err := sshexec.HashBinary(self)
		if err != nil {
			return nil, fmt.Errorf("read the gorun binary: %w", err)
		}
		if path, err = sshexec.PlaceSrunAgent(ctx, hostNames(hosts), bin); err != nil {
			return nil, fmt.Errorf("%w:\n%w", errUnreachable, err)
		}
	}
	runners := make(map[string]sshexec.Runner, len(hosts))
	for _, h := range hosts {
		runners[h.Name] = sshexec.NewSrun(h.Name, path)
	}
	return runners, nil
}

func hostNames(hosts []hosts.Host) []string {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	return names
}

// slurmNodeFindings is Slurm's word on the allocation's nodes (drained,
// down, not responding), when gorun runs inside one and the nodes are its;
// none when sinfo cannot be asked.
func slurmNodeFindings(ctx context.Context, o cmdline.Options, hosts []hosts.Host) []preflight.Finding {
	if len(hosts) == 0 || o.Hosts != "" || o.Hostfile != "" || os.Getenv("SLURM_JOB_ID") == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	argv := preflight.SinfoArgv(hostNames(hosts))
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	if err != nil {
		return nil
	}
	return preflight.CheckSlurmNodes(out)
}

// slurmStepArgs completes the command line of one task of `srun gorun`
// with a static rendezvous over several nodes: without --node-rank every
// torchrun would be node 0, so the task's SLURM_NODEID is its rank.
func slurmStepArgs(args []string, cl cmdline.CommandLine) []string {
	if !hosts.SlurmStep(os.Getenv) || cl.Set("node_rank") || cl.Torchrun.NNodesMax < 2 || cl.Torchrun.RdzvBackend != "static" {
		return args
	}
	id := os.Getenv("SLURM_NODEID")
	if id == "" {
		return args
	}
	return append([]string{"--node-rank=" + id}, args...)
}
