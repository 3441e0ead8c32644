package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// recheckTimeout bounds the checks before a restart; a node that has not
// answered by then counts as failed.
const recheckTimeout = 30 * time.Second

// recheck runs before every restart in head-node mode: every node of the
// group is checked again (reached, and with --preflight on, the per-node
// checks). A node that fails is dropped while at least --nnodes' minimum
// remain, and the plan is rebuilt for the nodes left; without a range, or
// with too few left, the run stops with the findings (exit 2).
func recheck(ctx context.Context, cl cmdline.CommandLine, spec envplan.Spec, plan envplan.Plan,
	runners map[string]sshexec.Runner, diag io.Writer) (envplan.Spec, envplan.Plan, error) {
	user := ctx
	ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	defer cancel()
	report := checkNodes(ctx, cl, spec.Hosts, runners, io.Discard)
	failed := failedNodes(report, cl.Gorun.Preflight == "on")
	// Without node 0, the master moves: the others' routes are checked
	// again against the new node 0.
	if len(failed) > 0 && failed[spec.Hosts[0].Name] != "" && len(failed) < len(spec.Hosts) {
		keep := keepHosts(spec.Hosts, failed)
		report = checkNodes(ctx, cl, keep, runners, io.Discard)
		for name, why := range failedNodes(report, cl.Gorun.Preflight == "on") {
			failed[name] = why
		}
	}
	if user.Err() != nil {
		return spec, plan, fmt.Errorf("%w while checking the nodes before a restart", launch.ErrInterrupted)
	}
	if len(failed) == 0 {
		return spec, plan, nil
	}
	keep := keepHosts(spec.Hosts, failed)
	lo := cl.Torchrun.NNodesMin
	elastic := lo < cl.Torchrun.NNodesMax
	for _, h := range spec.Hosts {
		if why := failed[h.Name]; why != "" {
			fmt.Fprintf(diag, "gorun: %s fails its checks before the restart: %s\n", h.Name, why)
		}
	}
	switch {
	case !elastic:
		report.WriteText(diag)
		return spec, plan, fmt.Errorf("%w: a node failed before the restart, and --nnodes gives no range to go on without it (for example --nnodes %d:%d)",
			errPreflightFailed, max(1, len(spec.Hosts)-1), len(spec.Hosts))
	case len(keep) < lo:
		report.WriteText(diag)
		return spec, plan, fmt.Errorf("%w: only %d nodes pass their checks, below --nnodes minimum %d", errPreflightFailed, len(keep), lo)
	}
	spec.Hosts = keep
	next, err := envplan.Build(spec, planFacts(report))
	if err != nil {
		return spec, plan, fmt.Errorf("plan for the %d nodes left: %w", len(keep), err)
	}
	dropped := slices.Sorted(maps.Keys(failed))
	fmt.Fprintf(diag, "gorun: dropping %s; the group restarts on %d nodes (--nnodes %d:%d)\n",
		strings.Join(dropped, ", "), len(keep), lo, cl.Torchrun.NNodesMax)
	return spec, next, nil
}

// failedNodes names the nodes that fail, with the first reason: not
// reached, or, when checks count, a failed per-node check.
func failedNodes(r preflight.Report, checks bool) map[string]string {
	failed := map[string]string{}
	for _, n := range r.Nodes {
		for _, f := range n.Findings {
			if f.Severity != preflight.SeverityFail || (!checks && f.ID != "node.reach") {
				continue
			}
			why := f.Message
			if f.Evidence != "" {
				why += " (" + f.Evidence + ")"
			}
			failed[n.Host] = why
			break
		}
	}
	return failed
}

func keepHosts(all []hosts.Host, failed map[string]string) []hosts.Host {
	var keep []hosts.Host
	for _, h := range all {
		if failed[h.Name] == "" {
			keep = append(keep, h)
		}
	}
	return keep
}
