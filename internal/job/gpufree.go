package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/sshexec"
)

// gpuFreeSlack is how much longer than a node's own bound the head waits
// for its answer: gorun's start there (over SSH, an upload maybe) and
// NVML's.
const gpuFreeSlack = 20 * time.Second

// gpuFree is the hook that makes sure, before a restart, that no process
// of the job holds GPU memory on any node of the failed attempt: every
// node runs the teardown check (`gorun _gpufree`, internal/node), which
// SIGKILLs what is left of the job on its GPUs (a process whose
// environment holds wire.RunIDVar with this run's id, escaped from the
// agent's teardown) and waits up to its bound for the memory. A node that
// had something to kill or wait for is said in one line; one still held
// past the bound ends the run (ErrGPUNotFreed). A node without NVML or
// GPUs is skipped from then on, said once for the run. A node that cannot
// be asked is said and left to the recheck that follows.
type gpuFree struct {
	runID   string
	runners map[string]sshexec.Runner
	diag    io.Writer
	// timeout is each node's bound on its wait.
	timeout time.Duration
	fanout  int             // nodes asked at once (0: sshexec.DefaultFanout)
	noGPUs  map[string]bool // nodes that answered "no GPUs"
	said    bool            // the no-GPUs line, once for the run
}

// newGPUFree is the check for runners' nodes; those preflight found
// without a GPU (facts) are never asked: the check would cost a restart
// an ssh round trip per node for nothing.
func newGPUFree(runID string, runners map[string]sshexec.Runner, facts envplan.Facts, diag io.Writer) *gpuFree {
	g := &gpuFree{runID: runID, runners: runners, diag: diag,
		timeout: wire.DefaultGPUFreeTimeout, noGPUs: map[string]bool{}}
	for host, f := range facts {
		if len(f.GPUs) == 0 {
			g.noGPUs[host] = true
		}
	}
	return g
}

func (*gpuFree) Name() string { return "GPU teardown check" }

// BeforeAttempt checks the nodes of the previous attempt's plan (the
// recheck that follows may drop one of them), all at once, and records
// when it was over in the restart's timeline (a.Restart.GPUFree).
func (g *gpuFree) BeforeAttempt(ctx context.Context, a *Attempt) error {
	if a.K == 0 {
		return nil
	}
	var names []string
	for _, n := range a.Plan.Nodes {
		if g.runners[n.Host] != nil && !g.noGPUs[n.Host] {
			names = append(names, n.Host)
		}
	}
	if len(names) == 0 {
		if !g.said && len(g.noGPUs) > 0 {
			g.said = true
			fmt.Fprintf(g.diag, "gorun: GPU teardown check: no GPUs on %s (preflight); nothing to check\n", nodesText(len(g.noGPUs)))
		}
		return nil
	}
	answers := g.ask(ctx, names)
	if a.Restart != nil {
		a.Restart.GPUFree = a.sinceFailure()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w while checking the GPUs before a restart", launch.ErrInterrupted)
	}
	var none []string
	var held []error
	for _, h := range names {
		ans := answers[h]
		switch {
		case ans.err != nil:
			fmt.Fprintf(g.diag, "gorun: GPU teardown check: %s: %s (not checked there)\n", h, userr.Printable(ans.err.Error()))
		case ans.NoGPUs:
			g.noGPUs[h] = true
			none = append(none, h)
		default:
			if err := g.report(h, ans.GPUFreeAnswer); err != nil {
				held = append(held, &sshexec.HostError{Host: h, Err: err})
			}
		}
	}
	if len(none) > 0 && !g.said {
		g.said = true
		if len(none) == len(names) {
			fmt.Fprintf(g.diag, "gorun: GPU teardown check: no GPUs on %s; nothing to check\n", nodesText(len(none)))
		} else {
			fmt.Fprintf(g.diag, "gorun: GPU teardown check: no GPUs on %s (%s); nothing to check there\n",
				nodesText(len(none)), strings.Join(none, ", "))
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("%w:\n%w", ErrGPUNotFreed, errors.Join(held...))
	}
	return nil
}

// gpuFreeAnswer is one node's answer, or why there is none.
type gpuFreeAnswer struct {
	wire.GPUFreeAnswer
	err error
}

// ask runs the check on every node at once, each bounded.
func (g *gpuFree) ask(ctx context.Context, names []string) map[string]*gpuFreeAnswer {
	req, _ := json.Marshal(wire.GPUFreeRequest{Var: wire.RunIDVar, Value: g.runID, TimeoutSeconds: g.timeout.Seconds()})
	answers := make(map[string]*gpuFreeAnswer, len(names))
	for _, h := range names {
		answers[h] = &gpuFreeAnswer{err: errors.New("not asked")}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout+gpuFreeSlack)
	defer cancel()
	// Each call writes its own answer; the map itself is only read.
	sshexec.ForEach(ctx, names, g.fanout, func(ctx context.Context, host string) error {
		ans := answers[host]
		out, err := g.runners[host].AgentOutput(ctx, wire.GPUFreeCommand, string(req))
		if err == nil {
			if err = json.Unmarshal(out, &ans.GPUFreeAnswer); err != nil {
				err = fmt.Errorf("read its answer: %w", err)
			}
		}
		ans.err = err
		return nil
	})
	return answers
}

// report says what the check on host found of the job, if anything, and
// returns an error naming what still holds memory when it was not freed.
func (g *gpuFree) report(host string, ans wire.GPUFreeAnswer) error {
	if len(ans.Errors) > 0 {
		fmt.Fprintf(g.diag, "gorun: GPU teardown check: %s: %s\n", host, userr.Printable(strings.Join(ans.Errors, "; ")))
	}
	var found, left []string
	for _, gpu := range ans.GPUs {
		for _, p := range gpu.Processes {
			if !p.Job || p.MemoryMiB == 0 {
				continue
			}
			found = append(found, processText(p, gpu.Index))
			if p.Held {
				left = append(left, processText(p, gpu.Index))
			}
		}
	}
	if len(found) == 0 && ans.Free {
		return nil
	}
	line := fmt.Sprintf("%s: the job still held GPU memory after the teardown: %s", host, strings.Join(found, ", "))
	if ans.Free {
		fmt.Fprintf(g.diag, "gorun: %s; free after %s\n", userr.Printable(line), launch.ShortDuration(ans.Waited))
		return nil
	}
	if len(found) > 0 {
		fmt.Fprintf(g.diag, "gorun: %s; still held after %s\n", userr.Printable(line), launch.ShortDuration(ans.Waited))
	}
	if len(left) == 0 {
		return errors.New("the node says the job's processes still hold GPU memory, but names none")
	}
	return fmt.Errorf("%s still held after %s", strings.Join(left, ", "), launch.ShortDuration(ans.Waited))
}

// processText is one of the job's processes on a GPU, as gorun says it:
// "PID 1234 python train.py (4096 MiB on GPU 0, killed)".
func processText(p wire.GPUProcess, gpu int) string {
	mem := fmt.Sprintf("%d MiB", p.MemoryMiB)
	if p.MemoryMiB < 0 {
		mem = "memory NVML does not size"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "PID %d", p.PID)
	if p.Command != "" {
		b.WriteString(" " + p.Command)
	}
	fmt.Fprintf(&b, " (%s on GPU %d", mem, gpu)
	if p.Killed {
		b.WriteString(", killed")
	}
	b.WriteString(")")
	return b.String()
}

func nodesText(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}
