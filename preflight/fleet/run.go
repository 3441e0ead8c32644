package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// Agent runs gorun's hidden subcommands on a node; sshexec.Runner is one.
type Agent interface {
	AgentOutput(ctx context.Context, args ...string) ([]byte, error)
}

// Target is one node to check.
type Target struct {
	Host  string // the name in the report
	GPUs  []int  // the GPU indexes the job uses there; nil means all
	Agent Agent
}

// RunOptions say what the job wants and what the head knows.
type RunOptions struct {
	// Want is what the job needs of every node; GPUIDs comes from each
	// Target.
	Want preflight.Want
	// Request goes to every node's collector.
	Request preflight.Request
	// NodeTimeout bounds one node's answer; zero means DefaultNodeTimeout.
	NodeTimeout time.Duration
	// Environ is the head's environment: the NCCL variables in it are
	// linted, since the job inherits them.
	Environ map[string]string
	// ScriptName and Script are the training script as the head reads it,
	// for the script lint; nil Script skips it.
	ScriptName string
	Script     []byte
	// Progress, when set, is called as each node finishes, one call at a
	// time.
	Progress func(done, total int)
	// Across are findings the head made itself (Slurm's word on the
	// nodes), reported with the others.
	Across []preflight.Finding
	// Bandwidth (preflight.BandwidthNode, BandwidthAll or "") moves real bytes on
	// every node and, for BandwidthAll, between nodes.
	Bandwidth string
	// Master, when set, is probed from this machine while the nodes are
	// checked (preflight.ProbeMaster), and its finding joins the first target's: the
	// one node of a gorun that runs per pod, whose master is another pod.
	Master *preflight.MasterProbe
	// Fanout is how many nodes are asked at once (0: sshexec.DefaultFanout).
	Fanout int
	// TorchAt is where an earlier check of this run found torch, by host
	// (preflight.Request.TorchAt).
	TorchAt map[string]preflight.TorchAt
}

// DefaultNodeTimeout is how long the head waits for one node's facts. The
// node's own collector gives up a few seconds earlier and reports the
// steps that stalled; the head's limit catches a node whose agent or SSH
// session is wedged.
const DefaultNodeTimeout = 60 * time.Second

// collectorMargin is how much sooner than the head the collector stops.
const collectorMargin = 5 * time.Second

// Run collects every target's facts in parallel (at most opts.Fanout at
// a time), evaluates the checks per node and
// across nodes, plus the head-side lints, and returns the report. A node
// that cannot be reached, or does not answer within the node timeout,
// gets a fail finding that names it. Run returns early, with what it has,
// when ctx ends; the caller checks ctx.
func Run(ctx context.Context, targets []Target, opts RunOptions) preflight.Report {
	timeout := opts.NodeTimeout
	if timeout <= 0 {
		timeout = DefaultNodeTimeout
	}
	req := opts.Request
	if opts.Bandwidth != "" {
		req.Bandwidth = opts.Bandwidth
		if opts.NodeTimeout <= 0 {
			timeout += BandwidthNodeTime
		}
	}
	req.BudgetSeconds = max(timeout-collectorMargin, timeout/2).Seconds()
	arg, _ := json.Marshal(req) // plain strings and numbers: cannot fail

	hosts := make([]string, len(targets))
	index := make(map[string]int, len(targets))
	for i, t := range targets {
		hosts[i], index[t.Host] = t.Host, i
	}
	reports := make([]preflight.NodeReport, len(targets))
	var master chan preflight.Finding
	if opts.Master != nil && len(targets) > 0 {
		master = make(chan preflight.Finding, 1)
		go func() { master <- preflight.ProbeMaster(ctx, *opts.Master) }()
	}
	var mu sync.Mutex
	done := 0
	_ = sshexec.ForEach(ctx, hosts, opts.Fanout, func(ctx context.Context, host string) error {
		t := targets[index[host]]
		arg := arg
		if at, ok := opts.TorchAt[host]; ok && !req.SkipTorch {
			r := req
			r.TorchAt = &at
			arg, _ = json.Marshal(r)
		}
		reports[index[host]] = checkTarget(ctx, t, opts.Want, string(arg), timeout)
		if opts.Progress != nil {
			mu.Lock()
			done++
			opts.Progress(done, len(targets))
			mu.Unlock()
		}
		return nil
	})
	for i, t := range targets {
		if reports[i].Host == "" { // not started: ctx ended first
			reports[i] = unreached(t.Host, "node.reach", "preflight did not run on "+t.Host, ctx.Err(), "")
		}
	}
	if master != nil {
		reports[0].Findings = append(reports[0].Findings, <-master)
	}
	var cross []preflight.CrossResult
	if opts.Bandwidth == preflight.BandwidthAll && ctx.Err() == nil {
		cross = measureCross(ctx, targets, reports, opts.Request.Torchrun)
	}
	across := preflight.CheckAcross(reports)
	nics := make(map[string]float64, len(reports))
	for _, r := range reports {
		nics[r.Host] = preflight.NICRate(r.Facts.RDMA)
	}
	across = append(across, preflight.CheckCross(cross, nics)...)
	across = append(across, opts.Across...)
	across = append(across, preflight.LintNCCLEnv(opts.Environ)...)
	if opts.Script != nil {
		across = append(across, preflight.LintScript(opts.ScriptName, opts.Script)...)
	}
	rep := preflight.NewReport(reports, across)
	rep.Cross = cross
	return rep
}

// BandwidthNodeTime is how much longer the head waits for a node when
// --bandwidth is asked for: each measurement step has its own limit, and
// a stalled one ends the measurement, so this bounds the whole.
const BandwidthNodeTime = 90 * time.Second

// checkTarget collects one node's facts and checks them.
func checkTarget(ctx context.Context, t Target, want preflight.Want, req string, timeout time.Duration) preflight.NodeReport {
	nctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := t.Agent.AgentOutput(nctx, wire.CollectCommand, req)
	if err == nil && nctx.Err() != nil {
		err = nctx.Err()
	}
	var unfit *sshexec.UnfitError
	if errors.As(err, &unfit) {
		return unreached(t.Host, "gorun.fit", unfit.Error(), nil,
			"give the head a gorun built for the node (gorun-linux-ARCH beside gorun, from a release), or install one on the node and pass --remote-gorun PATH")
	}
	if err != nil {
		if errors.Is(nctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return unreached(t.Host, "node.timeout",
				fmt.Sprintf("preflight on %s did not answer within %s (step: collect facts on the node)", t.Host, timeout), err,
				"the node's gorun or its SSH session is wedged: log in and run `gorun preflight` there to see which step hangs")
		}
		return unreached(t.Host, "node.reach", "cannot collect facts on "+t.Host, err,
			"check that the node is up and that gorun can run there")
	}
	var facts preflight.Facts
	if err := json.Unmarshal(out, &facts); err != nil {
		return unreached(t.Host, "node.reach", "cannot read the facts "+t.Host+" sent", err,
			"run `gorun preflight` on the node itself; the gorun there may be a different version")
	}
	facts.Host = t.Host
	want.GPUIDs = t.GPUs
	return preflight.NodeReport{Host: t.Host, Facts: facts, Findings: preflight.Check(facts, want)}
}

func unreached(host, id, msg string, err error, remedy string) preflight.NodeReport {
	f := preflight.Finding{ID: id, Severity: preflight.SeverityFail, Message: msg, Remedy: remedy}
	if err != nil {
		f.Evidence = err.Error()
	}
	return preflight.NodeReport{Host: host, Findings: []preflight.Finding{f}}
}

// RouteTarget is the address every node checks its route to: the user's
// master address when given, else the address the head reached node 0 at
// (node0Addr, "host:port" or "" for this machine), proven on each node
// with a TCP connection to that port (node 0's sshd), else node 0's name.
func RouteTarget(masterAddr, node0, node0Addr string) (addr string, probePort int) {
	if masterAddr != "" {
		return masterAddr, 0
	}
	if host, port, err := net.SplitHostPort(node0Addr); err == nil && host != "" {
		p, _ := strconv.Atoi(port)
		return host, p
	}
	return node0, 0
}
