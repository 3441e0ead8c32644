package job

import (
	"context"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/inputfile"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/preflight/fleet"
	"github.com/gorun/gorun/sshexec"
)

// Preflight is `gorun preflight`: resolve the hosts, connect and check
// every node; nothing is started.
func Preflight(ctx context.Context, cfg Config, ui UI) (preflight.Report, error) {
	cl := cfg.CommandLine
	nodes, err := ResolveHosts(cl.Gorun, cfg.Getenv)
	if err != nil {
		return preflight.Report{}, err
	}
	runners, err := Connect(ctx, cl, nodes, cfg, ui)
	if err != nil {
		return preflight.Report{}, interrupted(ctx, "while connecting to the nodes", err)
	}
	defer closeAll(runners)
	report := Check(ctx, cl, nodes, runners, cfg, ui)
	if ctx.Err() != nil {
		return report, interrupted(ctx, "during preflight", nil)
	}
	return report, nil
}

// maxScriptBytes bounds the training script the head reads for the lint.
const maxScriptBytes = 16 << 20

// Check runs preflight on every node (fleet.Run), with a progress line
// on a live terminal when there are enough nodes to wait for.
func Check(ctx context.Context, cl cmdline.CommandLine, nodes []hosts.Host, runners map[string]sshexec.Runner, cfg Config, ui UI) preflight.Report {
	return check(ctx, cl, nodes, runners, cfg, ui, false, nil)
}

// recheckNodes is Check during the run, quietly. Without preflight no node is
// asked for its torch, which starts an interpreter on every node: such a
// check is about reach and routes, and the plan was made without torch's
// facts. With it, torch is looked for every time, so that a node whose
// torch broke since fails its check and a spare takes its place; where an
// earlier check found it (known), the node reads it there without
// starting the interpreter (preflight.ReadTorchAt).
func recheckNodes(ctx context.Context, cl cmdline.CommandLine, nodes []hosts.Host, runners map[string]sshexec.Runner, cfg Config, known map[string]preflight.TorchAt) preflight.Report {
	return check(ctx, cl, nodes, runners, cfg, UI{Err: io.Discard}, cl.Gorun.Preflight == "off", known)
}

// check is Check, asking no node for its torch with skipTorch, and
// asking a node to read its torch where known says an earlier check found
// it.
func check(ctx context.Context, cl cmdline.CommandLine, nodes []hosts.Host, runners map[string]sshexec.Runner, cfg Config, ui UI, skipTorch bool, known map[string]preflight.TorchAt) (report preflight.Report) {
	targets := []fleet.Target{{Host: "localhost", Agent: runners["localhost"]}}
	var unconnected []preflight.NodeReport // a spare that could not be reached: nothing to ask
	if len(nodes) > 0 {
		targets = targets[:0]
		for _, h := range nodes {
			if runners[h.Name] == nil {
				unconnected = append(unconnected, preflight.NodeReport{Host: h.Name, Findings: []preflight.Finding{{
					ID: "node.reach", Severity: preflight.SeverityFail, Message: "not connected: it could not be reached when the run started",
					Remedy: "check the node and start the run again to use it"}}})
				continue
			}
			targets = append(targets, fleet.Target{Host: h.Name, GPUs: h.GPUs, Agent: runners[h.Name]})
		}
	}
	if len(unconnected) > 0 {
		defer func() {
			report = preflight.NewReport(append(report.Nodes, unconnected...), report.Findings)
		}()
	}
	torchrun, script := nodePaths(cfg.Dir, cl)
	opts := fleet.RunOptions{
		Want:    preflight.Want{NProc: cl.Torchrun.NProcPerNode, GPUsRequested: cl.Torchrun.NProcPerNode == "gpu"},
		Request: preflight.Request{Torchrun: torchrun, Script: script, SkipTorch: skipTorch},
		Environ: cfg.Environ,
		Across:  slurmNodeFindings(ctx, cl.Gorun, nodes, cfg.Getenv),
		Fanout:  cl.Gorun.Fanout,
		TorchAt: known,
	}
	if bw := cl.Gorun.PreflightBandwidth; bw != "" && bw != "off" {
		opts.Bandwidth = bw
	}
	if len(nodes) > 0 {
		master := ""
		if cl.Set("master_addr") {
			master = cl.Torchrun.MasterAddr
		}
		if r := runners[nodes[0].Name]; r != nil {
			opts.Request.RouteTo, opts.Request.ProbePort = fleet.RouteTarget(master, nodes[0].Name, r.Addr())
		}
	}
	if t, _ := chooseTransport(cl, nodes, cfg); t == TransportPod {
		here := func(host string) bool { return thisMachine(ctx, host) }
		if p, ok := podMaster(cl, cfg.Getenv, here); ok {
			opts.Master = &p
		}
	}
	if !cl.Torchrun.NoPython && cl.Torchrun.TrainingScript != "" {
		if src, err := inputfile.Read(cl.Torchrun.TrainingScript, maxScriptBytes); err == nil {
			opts.ScriptName, opts.Script = cl.Torchrun.TrainingScript, src
		}
	}
	progress := startProgress(ui, "preflight", "checked", len(targets))
	defer progress.end()
	opts.Progress = progress.set
	return fleet.Run(ctx, targets, opts)
}

// slurmNodeFindings is Slurm's word on the allocation's nodes (drained,
// down, not responding), when gorun runs inside one and the nodes are its;
// none when sinfo cannot be asked.
func slurmNodeFindings(ctx context.Context, o cmdline.Options, nodes []hosts.Host, getenv func(string) string) []preflight.Finding {
	if len(nodes) == 0 || o.Hosts != "" || o.Hostfile != "" || getenv("SLURM_JOB_ID") == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	argv := preflight.SinfoArgv(hostNames(nodes))
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	if err != nil {
		return nil
	}
	return preflight.CheckSlurmNodes(out)
}

func hasWarnings(r preflight.Report) bool {
	for _, n := range append([]preflight.NodeReport{{Findings: r.Findings}}, r.Nodes...) {
		for _, f := range n.Findings {
			if f.Severity == preflight.SeverityWarn {
				return true
			}
		}
	}
	return false
}

// planFacts reduces preflight facts to what the plan needs.
func planFacts(r preflight.Report) envplan.Facts {
	facts := make(envplan.Facts, len(r.Nodes))
	for _, n := range r.Nodes {
		f := n.Facts
		nf := envplan.NodeFacts{Hostname: f.Hostname, CPUs: f.CPUsAllowed, Gorun: f.Gorun, Python: f.Torch.Python}
		for _, g := range f.GPUs {
			nf.GPUs = append(nf.GPUs, envplan.GPU{Index: g.Index, BusID: g.BusID, NUMANode: g.NUMANode, CPUs: g.LocalCPUs})
		}
		if f.Route != nil && f.Route.Err == "" {
			nf.Interface, nf.Address = f.Route.Interface, f.Route.Source
		}
		nf.P2PFaults = preflight.P2PFaults(f)
		for _, p := range f.RDMA {
			if p.State == "ACTIVE" {
				nf.IBPorts = append(nf.IBPorts, p.Name())
			}
		}
		facts[n.Host] = nf
	}
	return facts
}

// nodePaths are the torchrun command and the training script as the
// collector on a node must see them: it runs in the agent's own
// directory, and the job in dir, so a relative path is made absolute in
// dir. A bare program name is left to the PATH, and a module (-m) has no
// file to hash.
func nodePaths(dir string, cl cmdline.CommandLine) (torchrun, script string) {
	torchrun = cl.Gorun.Torchrun
	if first, rest, _ := strings.Cut(torchrun, " "); strings.Contains(first, "/") {
		torchrun = strings.TrimSpace(absIn(dir, first) + " " + rest)
	}
	c := cl.Torchrun
	switch {
	case c.Module && !c.RunPath:
	case c.NoPython && !strings.Contains(c.TrainingScript, "/"):
		script = c.TrainingScript
	default:
		script = absIn(dir, c.TrainingScript)
	}
	return torchrun, script
}

// absIn is p made absolute in dir when it is relative.
func absIn(dir, p string) string {
	if p == "" || dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// torchPlaces is where the run's checks found each node's torch, so that
// a recheck reads it there (recheck). A node dialled again (it may have
// been rebuilt meanwhile) is looked at afresh.
type torchPlaces struct {
	mu sync.Mutex
	m  map[string]preflight.TorchAt
}

// known is a copy of what was found, by host.
func (t *torchPlaces) known() map[string]preflight.TorchAt {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.m)
}

// learn keeps where the nodes of r found their torch.
func (t *torchPlaces) learn(r preflight.Report) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range r.Nodes {
		if tf := n.Facts.Torch; tf.Found && tf.Dir != "" {
			if t.m == nil {
				t.m = map[string]preflight.TorchAt{}
			}
			t.m[n.Host] = preflight.TorchAt{Python: tf.Python, Dir: tf.Dir}
		}
	}
}

// forget drops what was found on host.
func (t *torchPlaces) forget(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, host)
}
