package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// runPreflight runs only the checks (or explains a pasted topology).
func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	asJSON, topoFile, rest, err := preflightArgs(args)
	if err != nil {
		return err
	}
	if topoFile != "" {
		data, err := os.ReadFile(topoFile)
		if err != nil {
			return &envplan.InputError{Where: "--topo-file", Problem: err.Error(), Fix: "give the path of a saved `nvidia-smi topo -m` output"}
		}
		rep, err := preflight.ExplainTopology(topoFile, data)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, rep)
		}
		rep.WriteText(stdout)
		return nil
	}
	cl, err := envplan.ParseCommandLine(append(rest, "-"), os.Getenv) // the script is optional here
	if err != nil {
		return err
	}
	if cl.Torchrun.TrainingScript == "-" {
		cl.Torchrun.TrainingScript = ""
	}
	hosts, err := resolveHosts(cl.Gorun)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	runners, err := connect(ctx, cl, hosts, self)
	if err != nil {
		return interrupted(ctx, "while connecting to the nodes", err)
	}
	defer closeAll(runners)
	report := checkNodes(ctx, cl, hosts, runners, stderr)
	if ctx.Err() != nil {
		return interrupted(ctx, "during preflight", nil)
	}
	if asJSON {
		err = writeJSON(stdout, report)
	} else {
		report.WriteText(stdout)
	}
	if err == nil && !report.OK {
		return errPreflightFailed
	}
	return err
}

// preflightArgs takes preflight's own options off the front of args.
func preflightArgs(args []string) (asJSON bool, topoFile string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--json":
			asJSON = true
		case a == "--topo-file" || a == "--topo_file":
			if i+1 >= len(args) {
				return false, "", nil, &envplan.InputError{Where: a, Problem: "expected a file name", Fix: "--topo-file FILE"}
			}
			i++
			topoFile = args[i]
		case strings.HasPrefix(a, "--topo-file=") || strings.HasPrefix(a, "--topo_file="):
			topoFile = a[len("--topo-file="):]
		default:
			rest = append(rest, a)
		}
	}
	return asJSON, topoFile, rest, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkNodes collects facts on every node in parallel and evaluates the
// checks, per node and across nodes, plus the head-side lints (the NCCL
// variables the user exported, the training script).
func checkNodes(ctx context.Context, cl envplan.CommandLine, hosts []envplan.Host, runners map[string]sshexec.Runner, progress io.Writer) preflight.Report {
	routeTo, probePort := masterAddress(cl, hosts, runners)
	type node struct {
		name string
		gpus []int
	}
	nodes := []node{{name: "localhost"}}
	if len(hosts) > 0 {
		nodes = nodes[:0]
		for _, h := range hosts {
			nodes = append(nodes, node{h.Name, h.GPUs})
		}
	}
	reports := make([]preflight.NodeReport, len(nodes))
	var wg sync.WaitGroup
	done := make(chan struct{}, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer func() { done <- struct{}{}; wg.Done() }()
			want := preflight.Want{NProc: cl.Torchrun.NProcPerNode, GPUsRequested: cl.Torchrun.NProcPerNode == "gpu", GPUIDs: n.gpus}
			opts := collectRequest{Torchrun: cl.Gorun.Torchrun, Script: cl.Torchrun.TrainingScript, RouteTo: routeTo, ProbePort: probePort}
			facts, err := collectOn(ctx, runners[n.name], opts)
			if err != nil {
				reports[i] = preflight.NodeReport{Host: n.name, Findings: []preflight.Finding{{
					ID: "node.reach", Severity: preflight.SeverityFail, Message: "cannot collect facts on " + n.name,
					Evidence: err.Error(), Remedy: "check that the node is up and that gorun can run there"}}}
				return
			}
			facts.Host = n.name
			reports[i] = preflight.NodeReport{Host: n.name, Facts: facts, Findings: preflight.Check(facts, want)}
		}()
	}
	showProgress(progress, len(nodes), done)
	wg.Wait()
	across := preflight.CheckAcross(reports)
	across = append(across, preflight.LintNCCLEnv(environ())...)
	if src, err := os.ReadFile(cl.Torchrun.TrainingScript); err == nil && !cl.Torchrun.NoPython {
		across = append(across, preflight.LintScript(cl.Torchrun.TrainingScript, src)...)
	}
	return preflight.NewReport(reports, across)
}

// showProgress counts nodes as their checks finish, on a terminal only and
// when there are enough nodes for the wait to be noticed.
func showProgress(w io.Writer, total int, done <-chan struct{}) {
	tty := isTerminal(w)
	for k := 1; k <= total; k++ {
		<-done
		if tty && total >= 4 {
			fmt.Fprintf(w, "\rpreflight: %d/%d nodes checked", k, total)
			if k == total {
				fmt.Fprint(w, "\r\x1b[K")
			}
		}
	}
}

// masterAddress is the address the nodes will reach the master at: the
// user's --master-addr when given, else the address the head reached node 0
// at. Each node reports the interface that routes there, and, when node 0
// was reached over SSH, proves it with a TCP connection to node 0's sshd
// (probePort). "" in local mode.
func masterAddress(cl envplan.CommandLine, hosts []envplan.Host, runners map[string]sshexec.Runner) (addr string, probePort int) {
	if len(hosts) == 0 {
		return "", 0
	}
	r, remote := runners[hosts[0].Name].(*sshexec.Remote)
	var host, port string
	if remote {
		host, port, _ = net.SplitHostPort(r.Addr())
	}
	probePort, _ = strconv.Atoi(port)
	switch {
	case cl.Set("master_addr"):
		return cl.Torchrun.MasterAddr, 0
	case host != "":
		return host, probePort
	}
	return hosts[0].Name, 0
}

// collectRequest tells a node's collector what to look at: the torchrun it
// will run (to find the Python and torch behind it), the training script
// (hashed, to compare across nodes) and the master address to route to.
// It travels as JSON to `gorun _collect` on remote nodes.
type collectRequest struct {
	Torchrun  string `json:"torchrun"`
	Script    string `json:"script"`
	RouteTo   string `json:"route_to"`
	ProbePort int    `json:"probe_port"`
}

// collectOn gathers one node's facts: in-process for the head, through the
// uploaded gorun (`gorun _collect REQUEST`) elsewhere.
func collectOn(ctx context.Context, r sshexec.Runner, req collectRequest) (preflight.Facts, error) {
	if _, ok := r.(*sshexec.Local); ok {
		return collectLocal(ctx, req), nil
	}
	remote, ok := r.(*sshexec.Remote)
	if !ok {
		return preflight.Facts{}, fmt.Errorf("no collector for %T", r)
	}
	arg, _ := json.Marshal(req)
	out, err := remote.AgentOutput(ctx, "_collect", string(arg))
	if err != nil {
		return preflight.Facts{}, err
	}
	var facts preflight.Facts
	if err := json.Unmarshal(out, &facts); err != nil {
		return preflight.Facts{}, fmt.Errorf("read facts from %s: %w", r.Node(), err)
	}
	return facts, nil
}

// collectLocal gathers this machine's facts. NVML is loaded here, in main,
// and only here.
func collectLocal(ctx context.Context, req collectRequest) preflight.Facts {
	src := preflight.Sources{
		NVML:       nvml.New(),
		Root:       "/",
		Run:        runCommand,
		Environ:    os.Environ(),
		Now:        time.Now,
		Interfaces: preflight.HostInterfaces,
		Route:      preflight.HostRoute,
		Torch: func(ctx context.Context) preflight.TorchFacts {
			return preflight.FindTorch(ctx, torchrunPython(req.Torchrun), runArgv, os.ReadFile)
		},
	}
	facts := preflight.Collect(ctx, src, preflight.CollectOptions{Script: req.Script, RouteTarget: req.RouteTo, ProbePort: req.ProbePort})
	facts.Gorun, _ = os.Executable()
	return facts
}

// torchrunPython is the interpreter torchrun runs under (its #! line).
func torchrunPython(torchrun string) string {
	prog := "torchrun"
	if f := strings.Fields(torchrun); len(f) > 0 {
		prog = f[0]
	}
	if p, err := exec.LookPath(prog); err == nil {
		prog = p
	}
	py := preflight.TorchrunPython(prog, os.ReadFile)
	if py == "" {
		py = "python3"
	}
	if p, err := exec.LookPath(py); err == nil {
		py = p
	}
	return py
}

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).Output()
}

func runArgv(ctx context.Context, argv []string) ([]byte, error) {
	return runCommand(ctx, argv[0], argv[1:]...)
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
		for _, p := range f.RDMA {
			if p.State == "ACTIVE" {
				nf.IBPorts = append(nf.IBPorts, p.Name())
			}
		}
		facts[n.Host] = nf
	}
	return facts
}
