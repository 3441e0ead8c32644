package sshexec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorun/gorun/internal/wire"
)

// Srun runs on one node of the Slurm allocation gorun runs in, through
// srun: the node agent and every command are job steps of one task on
// that node, so Slurm starts, tracks, accounts and cleans them up as it
// does any step, and no SSH is needed. The agent speaks the same protocol
// over srun's standard input and output as over an SSH session: srun
// forwards both unchanged and closes the task's input when gorun's ends.
//
// Each job is a step of its own, one per node and attempt, rather than
// one step over every node: a step's tasks share one output stream, and
// every node's agent needs its own.
type Srun struct {
	*Local
}

var _ Runner = (*Srun)(nil)

// NewSrun returns a Runner for node, a node of the current allocation
// (SLURM_JOB_ID set), where gorun is the path of the gorun binary on the
// node.
func NewSrun(node, gorun string) *Srun {
	l := NewLocal(gorun)
	l.node = node
	l.launcher = SrunArgv(node)
	// Marks the agent's step, so the agent keeps the step's own Slurm
	// variables from the workers (see internal/agent's withoutStepVars).
	l.agentEnv = append(os.Environ(), wire.AgentStepVar+"=1")
	// srun passes SIGTERM on to the task and ends the step when it exits;
	// killing srun would leave the task running until the allocation ends.
	l.stop = func(cmd *exec.Cmd) error { return cmd.Process.Signal(syscall.SIGTERM) }
	return &Srun{Local: l}
}

// SrunArgv is the srun command line that runs one task on node, before the
// command itself:
//   - --overlap: the agent's step shares the node with gorun's other steps
//     (preflight, a flight-recorder gather); without it they would wait;
//   - no --exact: the step gets every CPU of the node (and, by Slurm's
//     default, every GPU of the job there), for torchrun to bind;
//   - --kill-on-bad-exit: the step ends with its task, whatever the
//     cluster's KillOnBadExit;
//   - --mpi=none, --quiet: no MPI plugin, no srun chatter in the output.
//
// No --unbuffered: it runs the task on a pseudo-terminal, which would
// rewrite the agent's binary frames.
func SrunArgv(node string) []string {
	return []string{"srun", "--nodes=1", "--ntasks=1", "--nodelist=" + node,
		"--overlap", "--kill-on-bad-exit=1", "--mpi=none", "--quiet", "--job-name=gorun"}
}

// PlaceSrunAgent returns where bin (this gorun) is on every node of nodes,
// in the current allocation: its own path when every node sees the same
// file there (a shared filesystem, the usual case in a Slurm cluster,
// checked by content), else /tmp/<bin.Name>: as it is when every node
// already holds that copy (an earlier or concurrent run's; sbcast --force
// over a copy another job is running fails with ETXTBSY), else copied there
// by sbcast first.
func PlaceSrunAgent(ctx context.Context, nodes []string, bin Binary) (string, error) {
	if onEveryNode(ctx, nodes, bin.Path, bin) {
		return bin.Path, nil
	}
	dst := "/tmp/" + bin.Name
	if ctx.Err() == nil && onEveryNode(ctx, nodes, dst, bin) {
		return dst, nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	cast := exec.CommandContext(ctx, "sbcast", "--force", "--preserve", bin.Path, dst)
	if out, err := cast.CombinedOutput(); err != nil {
		// err is not wrapped: sbcast's exit status is not the job's.
		return "", fmt.Errorf("copy gorun to the nodes with sbcast %s %s: %v: %s", bin.Path, dst, err, strings.TrimSpace(string(out)))
	}
	return dst, nil
}

// onEveryNode reports whether every node of nodes holds bin's content at
// path, asked through one srun step.
func onEveryNode(ctx context.Context, nodes []string, path string, bin Binary) bool {
	check := []string{"srun", "--nodes=" + strconv.Itoa(len(nodes)), "--ntasks=" + strconv.Itoa(len(nodes)),
		"--ntasks-per-node=1", "--nodelist=" + strings.Join(nodes, ","),
		"--overlap", "--mpi=none", "--quiet", "--job-name=gorun", "sha256sum", path}
	out, err := exec.CommandContext(ctx, check[0], check[1:]...).Output()
	return err == nil && sameHashes(out, len(nodes), strings.TrimPrefix(bin.Name, "gorun-"))
}

// sameHashes reports whether out holds n sha256sum lines, each starting
// with prefix.
func sameHashes(out []byte, n int, prefix string) bool {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != n || prefix == "" {
		return false
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			return false
		}
	}
	return true
}
