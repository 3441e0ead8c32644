package job

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
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

// recheck is the hook that checks every node again before a restart in
// head-node mode, the spares with them: reached, and with --preflight on,
// the per-node checks. A node that fails is replaced by a spare when one
// is ready (spares.replace: the other nodes keep their node ranks), else
// dropped while at least --nnodes' minimum remain, and the plan is
// rebuilt for the nodes of the next attempt; without a range, or with too
// few left, the run ends with the findings (ErrRecheckFailed).
type recheck struct {
	cl   cmdline.CommandLine
	diag io.Writer
	// check runs preflight on hosts (Check, through the run's runners).
	check func(ctx context.Context, nodes []hosts.Host) preflight.Report
	// forget drops where check found a node's torch: it was dialled again.
	forget func(node string)
	// early is the check started as the last attempt began to stop
	// (Stopping), for the restart after it; nil when none is under way.
	early *earlyCheck
	// spares are checked with the nodes and step in for those that fail
	// (nil: none).
	spares *spares
	// cool stops the agent on standby of a node that does not run the
	// next attempt (sshexec.Warmer).
	cool func(node string)
	// conns are the run's runners, one per node: a node whose connection
	// is lost is dialled again (redial), and its new runner put here.
	conns  map[string]sshexec.Runner
	redial *redial // nil: no node is dialled again
}

// earlyCheck is a recheck started beside a failed attempt's stop, so that
// the restart does not wait for it after the stop: an ssh session and
// `gorun _collect` per node, 0.4-0.8 s on the 3-node test cluster.
type earlyCheck struct {
	after  int          // the attempt that failed
	nodes  []hosts.Host // the nodes it ran on
	done   chan struct{}
	report preflight.Report // once done is closed
}

// Stopping starts the recheck for the restart after a.
func (s *recheck) Stopping(ctx context.Context, a *Attempt) {
	e := &earlyCheck{after: a.K, nodes: append(slices.Clone(a.Spec.Hosts), s.spares.all()...), done: make(chan struct{})}
	s.early = e
	go func() {
		defer close(e.done)
		ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
		defer cancel()
		e.report = withoutJobsOwn(s.check(ctx, e.nodes))
	}()
}

// withoutJobsOwn drops from a report taken while the failed attempt was
// still stopping what that attempt's own processes cause: a GPU busy
// with compute processes. Whether the job's processes let go of their
// GPUs is the teardown check's (gpuFree), which runs before the restart.
func withoutJobsOwn(r preflight.Report) preflight.Report {
	for i, n := range r.Nodes {
		r.Nodes[i].Findings = slices.DeleteFunc(slices.Clone(n.Findings), func(f preflight.Finding) bool {
			return f.ID == "gpu.busy"
		})
	}
	return r
}

// takeEarly returns the early recheck's report for attempt k when one was
// started for it on the same nodes, once it is in; false when there is
// none. It waits for a check under way either way (bounded by its own
// recheckTimeout): the check reads the runners, which a node dialled
// again replaces.
func (s *recheck) takeEarly(k int, nodes []hosts.Host) (preflight.Report, bool) {
	e := s.early
	s.early = nil
	if e == nil {
		return preflight.Report{}, false
	}
	<-e.done
	if e.after != k-1 || !slices.EqualFunc(e.nodes, nodes, func(a, b hosts.Host) bool { return a.Name == b.Name }) {
		return preflight.Report{}, false
	}
	return e.report, true
}

func newRecheck(r *run) *recheck {
	return &recheck{cl: r.cl, diag: r.ui.Err, spares: r.spares, check: func(ctx context.Context, nodes []hosts.Host) preflight.Report {
		report := recheckNodes(ctx, r.cl, nodes, r.conns, r.cfg, r.torch.known())
		r.torch.learn(report)
		return report
	}, forget: r.torch.forget, cool: func(node string) {
		if w, ok := r.conns[node].(sshexec.Warmer); ok {
			w.Cool()
		}
	}, conns: r.conns, redial: newRedial(r)}
}

// Finish ends the dialling of lost nodes.
func (s *recheck) Finish(context.Context, *Attempt, launch.Result, error) error {
	s.redial.stop()
	return nil
}

func (*recheck) Name() string { return "recheck" }

func (s *recheck) BeforeAttempt(ctx context.Context, a *Attempt) (err error) {
	if a.K == 0 {
		return nil
	}
	user := ctx
	defer func(checked []hosts.Host) {
		if err == nil {
			kept := append(slices.Clone(a.Spec.Hosts), s.spares.readyHosts()...)
			s.coolLeft(checked, kept)
			s.redialLost(user, checked, kept)
		}
	}(append(slices.Clone(a.Spec.Hosts), s.spares.all()...))
	ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	defer cancel()
	checks := s.cl.Gorun.Preflight == "on"
	nodes := a.Spec.Hosts
	checked := append(slices.Clone(nodes), s.spares.all()...)
	report, ok := s.takeEarly(a.K, checked)
	if back, lines := s.redial.take(ctx); len(back) > 0 || len(lines) > 0 {
		for _, l := range lines {
			fmt.Fprintln(s.diag, l)
		}
		for name, r := range back {
			if old := s.conns[name]; old != nil {
				old.Close()
			}
			s.conns[name] = r
			if s.forget != nil {
				s.forget(name)
			}
		}
		ok = ok && len(back) == 0 // checked again through the new runners
	}
	if !ok {
		report = s.check(ctx, checked)
	}
	failed := failedNodes(report, checks)
	if a.Restart != nil {
		defer func() { a.Restart.Checked = a.sinceFailure() }() // with the plan made again, if it is
	}
	next, failed, done, lines := s.spares.replace(nodes, failed)
	for _, l := range lines {
		fmt.Fprintln(s.diag, l)
	}
	for i := range done {
		done[i].attempt = a.K
	}
	a.Replaced = done
	if next[0].Name != nodes[0].Name && len(failed) == 0 {
		// A spare is node 0 now: the routes to it are checked again.
		report = s.check(ctx, next)
		failed = failedNodes(report, checks)
	}
	if len(done) > 0 {
		report = jobReport(report, next)
	}
	nodes = next
	// Without node 0, the master moves: the others' routes are checked
	// again against the new node 0.
	if len(failed) > 0 && failed[nodes[0].Name] != "" && len(failed) < len(nodes) {
		report = s.check(ctx, keepHosts(nodes, failed))
		for name, why := range failedNodes(report, checks) {
			failed[name] = why
		}
	}
	if user.Err() != nil {
		return fmt.Errorf("%w while checking the nodes before a restart", launch.ErrInterrupted)
	}
	if len(failed) == 0 {
		if len(done) == 0 {
			return nil
		}
		spec := a.Spec
		spec.Hosts = nodes
		plan, err := envplan.Build(spec, planFacts(report))
		if err != nil {
			return fmt.Errorf("plan with the spares: %w", err)
		}
		a.Spec, a.Plan = spec, plan
		return nil
	}
	keep := keepHosts(nodes, failed)
	lo, hi := s.cl.Torchrun.NNodesMin, s.cl.Torchrun.NNodesMax
	for _, h := range nodes {
		if why := failed[h.Name]; why != "" {
			fmt.Fprintf(s.diag, "gorun: %s fails its checks before the restart: %s\n", h.Name, why)
		}
	}
	switch {
	case lo >= hi:
		report.WriteText(s.diag)
		return fmt.Errorf("%w, and --nnodes gives no range to go on without it (for example --nnodes %d:%d)",
			ErrRecheckFailed, max(1, len(nodes)-1), len(nodes))
	case len(keep) < lo:
		report.WriteText(s.diag)
		return fmt.Errorf("%w: only %d nodes pass their checks, below --nnodes minimum %d", ErrRecheckFailed, len(keep), lo)
	}
	spec := a.Spec
	spec.Hosts = keep
	plan, err := envplan.Build(spec, planFacts(report))
	if err != nil {
		return fmt.Errorf("plan for the %d nodes left: %w", len(keep), err)
	}
	fmt.Fprintf(s.diag, "gorun: dropping %s; the group restarts on %d nodes (--nnodes %d:%d)\n",
		strings.Join(slices.Sorted(maps.Keys(failed)), ", "), len(keep), lo, hi)
	a.Spec, a.Plan = spec, plan
	return nil
}

// coolLeft stops, in parallel, the agents on standby of the checked nodes
// that are not kept (the next attempt's and the ready spares): a node
// that left the job, or a spare that failed its checks. A standby holds
// what its torchrun imported when it started; such a node may be broken
// now, or repaired by the time it is used again.
func (s *recheck) coolLeft(checked, kept []hosts.Host) {
	if s.cool == nil {
		return
	}
	var wg sync.WaitGroup
	for _, h := range checked {
		if !slices.ContainsFunc(kept, sameHost(h)) {
			wg.Go(func() { s.cool(h.Name) })
		}
	}
	wg.Wait()
}

// redialLost starts dialling again every checked node out of the job
// (not kept) whose connection is lost, in the background (redial). Only
// with spares: a node that answers again can only come back as one (a
// --nnodes range shrinks, and does not grow back).
func (s *recheck) redialLost(ctx context.Context, checked, kept []hosts.Host) {
	if s.redial == nil || s.spares == nil {
		return
	}
	for _, h := range checked {
		if !slices.ContainsFunc(kept, sameHost(h)) && lost(s.conns[h.Name]) {
			s.redial.start(ctx, h)
		}
	}
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

func keepHosts(nodes []hosts.Host, failed map[string]string) []hosts.Host {
	var keep []hosts.Host
	for _, h := range nodes {
		if failed[h.Name] == "" {
			keep = append(keep, h)
		}
	}
	return keep
}
