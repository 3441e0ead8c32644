package job

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// spares are the hosts past the job's size, in the order given: with
// --nnodes N (or MIN:MAX) and more hosts than N (MAX), the first N run the
// job and the rest wait, connected and checked, to take the place of a
// node that fails. A node replaced, or a spare that fails its checks, is
// retired; one that passes its checks again later is a spare again.
type spares struct {
	ready   []hosts.Host
	retired []hosts.Host
}

// splitSpares parts the hosts into the job's and the spares: only in
// head-node mode, on gorun's static rendezvous, with --nnodes given and
// more hosts than its maximum; otherwise every host runs the job.
func splitSpares(cl cmdline.CommandLine, nodes []hosts.Host) (active []hosts.Host, sp *spares) {
	c := cl.Torchrun
	if len(nodes) == 0 || !cl.Set("nnodes") || c.RdzvBackend != "static" || c.Standalone || len(nodes) <= c.NNodesMax {
		return nodes, nil
	}
	n := c.NNodesMax
	return slices.Clone(nodes[:n]), &spares{ready: slices.Clone(nodes[n:])}
}

// all is every host the spares know of, ready first.
func (s *spares) all() []hosts.Host {
	if s == nil {
		return nil
	}
	return append(slices.Clone(s.ready), s.retired...)
}

// readyHosts are the spares ready to step in.
func (s *spares) readyHosts() []hosts.Host {
	if s == nil {
		return nil
	}
	return s.ready
}

// replacement is one node's place taken by a spare.
type replacement struct {
	left, spare string
	rank        int // the node rank the spare takes
	why         string
	attempt     int // the attempt the spare runs first, from 0 (set by the recheck)
}

// replace settles the spares against a check of the active nodes and of
// every spare (failed: the nodes that fail, with why): a spare that fails
// is retired, a retired node that passes is ready again, and each active
// node that fails gets the first ready spare in its place, so every other
// node keeps its node rank. It returns the active nodes after that, the
// failures no spare was left for, and what it did, in lines for the
// console.
func (s *spares) replace(active []hosts.Host, failed map[string]string) (next []hosts.Host, left map[string]string, done []replacement, lines []string) {
	next, left = slices.Clone(active), map[string]string{}
	if s == nil {
		for _, h := range active {
			if why := failed[h.Name]; why != "" {
				left[h.Name] = why
			}
		}
		return next, left, nil, nil
	}
	var ready []hosts.Host
	for _, h := range s.ready {
		if why := failed[h.Name]; why != "" {
			lines = append(lines, fmt.Sprintf("gorun: spare %s fails its checks, so it is not used: %s", h.Name, why))
			s.retired = append(s.retired, h)
		} else {
			ready = append(ready, h)
		}
	}
	var retired []hosts.Host
	for _, h := range s.retired {
		if failed[h.Name] == "" && !slices.ContainsFunc(s.ready, sameHost(h)) {
			lines = append(lines, fmt.Sprintf("gorun: %s passes its checks again: a spare now", h.Name))
			ready = append(ready, h)
		} else {
			retired = append(retired, h)
		}
	}
	s.ready, s.retired = ready, retired
	for i, h := range next {
		why := failed[h.Name]
		if why == "" {
			continue
		}
		if len(s.ready) == 0 {
			left[h.Name] = why
			continue
		}
		spare := s.ready[0]
		s.ready = s.ready[1:]
		s.retired = append(s.retired, h)
		next[i] = spare
		done = append(done, replacement{left: h.Name, spare: spare.Name, rank: i, why: why})
		lines = append(lines, fmt.Sprintf("gorun: %s leaves the job (%s); spare %s takes its place, node rank %d (%s left)",
			h.Name, why, spare.Name, i, plural(len(s.ready), "spare")))
	}
	return next, left, done, lines
}

// runners are the ready spares' runners, each to hold a standby torchrun
// while an attempt runs (launch.Node.Standby), so that a spare taking a
// node's place starts warm.
func (s *spares) runners(conns map[string]sshexec.Runner) []sshexec.Runner {
	if s == nil {
		return nil
	}
	var rs []sshexec.Runner
	for _, h := range s.ready {
		if c := conns[h.Name]; c != nil {
			rs = append(rs, c)
		}
	}
	return rs
}

func sameHost(h hosts.Host) func(hosts.Host) bool {
	return func(o hosts.Host) bool { return o.Name == h.Name }
}

// jobReport is the part of r for nodes, its across-node checks made again
// over them alone: a spare that differs from the others (its torch, its
// script) says nothing of the nodes that run the job.
func jobReport(r preflight.Report, nodes []hosts.Host) preflight.Report {
	var sub []preflight.NodeReport
	for _, h := range nodes {
		for _, n := range r.Nodes {
			if n.Host == h.Name {
				sub = append(sub, n)
			}
		}
	}
	across := preflight.CheckAcross(sub)
	for _, f := range r.Findings {
		if !strings.HasPrefix(f.ID, "across.") { // Slurm's, and others not CheckAcross's
			across = append(across, f)
		}
	}
	return preflight.NewReport(sub, across)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// chooseActive settles the spares against the first preflight (report,
// of every node): failing spares are not used, and a failing node of the
// job is replaced by a passing spare. It returns the report of the nodes
// that run the job, which decides whether the job starts.
func (r *run) chooseActive(ctx context.Context, report preflight.Report) (preflight.Report, error) {
	before := r.spec.Hosts
	next, _, _, lines := r.spares.replace(before, failedNodes(report, true))
	for _, l := range lines {
		fmt.Fprintln(r.ui.Err, l)
	}
	r.spec.Hosts = next
	if next[0].Name != before[0].Name {
		// The master moved: the routes to it are checked again.
		report = Check(ctx, r.cl, next, r.conns, r.cfg, UI{Err: io.Discard})
		if ctx.Err() != nil {
			return report, interrupted(ctx, "during preflight; nothing was started", nil)
		}
	}
	return jobReport(report, next), nil
}

// nnodesText is --nnodes as given: "3" or "2:3".
func nnodesText(c cmdline.Config) string {
	if c.NNodesMin == c.NNodesMax {
		return fmt.Sprint(c.NNodesMax)
	}
	return fmt.Sprintf("%d:%d", c.NNodesMin, c.NNodesMax)
}

// connectSpares connects to the spares beside the job's nodes: a spare
// that cannot be reached is said and retired (never dialled again in this
// run), and does not stop the job.
func (r *run) connectSpares(ctx context.Context) {
	conns, err := Connect(ctx, r.cl, r.spares.ready, r.cfg, UI{Err: r.ui.Err})
	if err != nil { // one at a time, to know which
		conns = map[string]sshexec.Runner{}
		for _, h := range r.spares.ready {
			one, err := Connect(ctx, r.cl, []hosts.Host{h}, r.cfg, UI{Err: r.ui.Err})
			if err != nil {
				fmt.Fprintf(r.ui.Err, "gorun: spare %s cannot be reached, so it is not used: %s\n", h.Name, userr.Printable(err.Error()))
				continue
			}
			maps.Copy(conns, one)
		}
	}
	var ready []hosts.Host
	for _, h := range r.spares.ready {
		if conns[h.Name] != nil {
			ready = append(ready, h)
		} else {
			r.spares.retired = append(r.spares.retired, h)
		}
	}
	r.spares.ready = ready
	maps.Copy(r.conns, conns)
}
