package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/inputfile"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// preflightUsage is `gorun preflight --help`.
const preflightUsage = `usage: gorun preflight [--json] [gorun options] [torchrun options] [script]
       gorun preflight [--json] --topo-file FILE

Checks every node the job would run on (the same --hosts, --hostfile or
Slurm allocation, and the same torchrun options), in parallel, and prints
each finding with its evidence and a remedy. Nothing is started. Exits 0
when no check failed, 2 otherwise.

  --json            print the report as JSON
  --bandwidth node|all
                    also move real bytes and verify them: every GPU pair
                    (P2P), each GPU's host link, NCCL all_reduce on each
                    node (node), and all_reduce between nodes (all); each
                    figure judged against what the topology should give
  --topo-file FILE  explain a saved ` + "`nvidia-smi topo -m`" + ` output instead
                    (no nodes are contacted; only --json goes with it)

gorun --help lists the gorun and torchrun options.
`

// runPreflight runs only the checks (or explains a pasted topology).
func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	asJSON, topoFile, bandwidth, rest, err := preflightArgs(args)
	if errors.Is(err, cmdline.ErrHelp) {
		_, err = io.WriteString(stdout, preflightUsage)
		return err
	}
	if err != nil {
		return err
	}
	if topoFile != nil {
		if len(rest) > 0 {
			return &userr.InputError{Where: "--topo-file", Problem: fmt.Sprintf("explains a saved topology and contacts no node, so %q has nothing to act on", rest[0]),
				Fix: "use `gorun preflight --topo-file FILE [--json]` alone, or drop --topo-file to check the nodes"}
		}
		data, err := inputfile.Read(*topoFile, inputfile.DefaultMax)
		if err != nil {
			return &userr.InputError{Where: "--topo-file", Problem: err.Error(), Fix: "give the path of a saved `nvidia-smi topo -m` output"}
		}
		rep, err := preflight.ExplainTopology(*topoFile, data)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, rep)
		}
		rep.WriteText(stdout)
		return nil
	}
	cl, err := cmdline.Parse(append(rest, "-"), os.Getenv) // the script is optional here
	if err != nil {
		return err
	}
	if cl.Torchrun.TrainingScript == "-" {
		cl.Torchrun.TrainingScript = ""
	}
	if bandwidth != "" {
		cl.Gorun.PreflightBandwidth = bandwidth
	}
	hosts, err := resolveHosts(cl.Gorun)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	runners, err := connect(ctx, cl, hosts, self, stderr)
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
// topoFile is nil when --topo-file was not given.
func preflightArgs(args []string) (asJSON bool, topoFile *string, bandwidth string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case a == "--help" || a == "-h":
			return false, nil, "", nil, cmdline.ErrHelp
		case a == "--json":
			asJSON = true
		case name == "--bandwidth":
			if !hasValue {
				if i+1 >= len(args) {
					return false, nil, "", nil, &userr.InputError{Where: a, Problem: "expected node or all", Fix: "--bandwidth node (each node) or --bandwidth all (and between nodes)"}
				}
				i++
				value = args[i]
			}
			if value != preflight.BandwidthNode && value != preflight.BandwidthAll {
				return false, nil, "", nil, &userr.InputError{Where: name, Problem: fmt.Sprintf("%q is not node or all", value),
					Fix: "--bandwidth node (each node) or --bandwidth all (and between nodes)"}
			}
			bandwidth = value
		case name == "--topo-file" || name == "--topo_file":
			if !hasValue {
				if i+1 >= len(args) {
					return false, nil, "", nil, &userr.InputError{Where: a, Problem: "expected a file name", Fix: "--topo-file FILE"}
				}
				i++
				value = args[i]
			}
			if value == "" {
				return false, nil, "", nil, &userr.InputError{Where: name, Problem: "the file name is empty", Fix: "--topo-file FILE, the saved output of `nvidia-smi topo -m`"}
			}
			topoFile = &value
		case a == "--":
			return asJSON, topoFile, bandwidth, append(rest, args[i:]...), nil
		default:
			rest = append(rest, a)
		}
	}
	return asJSON, topoFile, bandwidth, rest, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkNodes runs preflight on every node (preflight.Run) and shows
// progress on a terminal.
func checkNodes(ctx context.Context, cl cmdline.CommandLine, hosts []hosts.Host, runners map[string]sshexec.Runner, progress io.Writer) preflight.Report {
	targets := []preflight.Target{{Host: "localhost", Agent: runners["localhost"]}}
	if len(hosts) > 0 {
		targets = targets[:0]
		for _, h := range hosts {
			targets = append(targets, preflight.Target{Host: h.Name, GPUs: h.GPUs, Agent: runners[h.Name]})
		}
	}
	opts := preflight.RunOptions{
		Want:    preflight.Want{NProc: cl.Torchrun.NProcPerNode, GPUsRequested: cl.Torchrun.NProcPerNode == "gpu"},
		Request: preflight.Request{Torchrun: cl.Gorun.Torchrun, Script: cl.Torchrun.TrainingScript},
		Environ: environ(),
		Across:  slurmNodeFindings(ctx, cl.Gorun, hosts),
	}
	if bw := cl.Gorun.PreflightBandwidth; bw != "" && bw != "off" {
		opts.Bandwidth = bw
	}
	if len(hosts) > 0 {
		master := ""
		if cl.Set("master_addr") {
			master = cl.Torchrun.MasterAddr
		}
		opts.Request.RouteTo, opts.Request.ProbePort = preflight.RouteTarget(master, hosts[0].Name, runners[hosts[0].Name].Addr())
	}
	if !cl.Torchrun.NoPython && cl.Torchrun.TrainingScript != "" {
		if src, err := inputfile.Read(cl.Torchrun.TrainingScript, maxScriptBytes); err == nil {
			opts.ScriptName, opts.Script = cl.Torchrun.TrainingScript, src
		}
	}
	if isTerminal(progress) && len(targets) >= 4 {
		opts.Progress = func(done, total int) {
			fmt.Fprintf(progress, "\rpreflight: %d/%d nodes checked", done, total)
			if done == total {
				fmt.Fprint(progress, "\r\x1b[K")
			}
		}
	}
	return preflight.Run(ctx, targets, opts)
}

// maxScriptBytes bounds the training script the head reads for the lint.
const maxScriptBytes = 16 << 20

// collectRequest answers `gorun _collect REQUEST` on a node: this
// machine's facts, as JSON on stdout.
func collectRequest(ctx context.Context, arg string, stdout io.Writer) error {
	var req preflight.Request
	if err := json.Unmarshal([]byte(arg), &req); err != nil {
		return fmt.Errorf("%s: bad request: %w", preflight.CollectCommand, err)
	}
	if b := req.Budget(); b > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b)
		defer cancel()
	}
	return json.NewEncoder(stdout).Encode(collectLocal(ctx, req))
}

// collectLocal gathers this machine's facts. NVML is loaded here, in main,
// and only here.
func collectLocal(ctx context.Context, req preflight.Request) preflight.Facts {
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
	facts := preflight.Collect(ctx, src, req.Options())
	facts.Gorun, _ = os.Executable()
	if req.Bandwidth != "" && ctx.Err() == nil {
		python := facts.Torch.Python
		if python == "" {
			python = torchrunPython(req.Torchrun)
		}
		bw := preflight.MeasureNode(ctx, preflight.BandwidthOptions{Python: python, Environ: os.Environ()})
		facts.Bandwidth = &bw
	}
	return facts
}

// bandwidthPair answers `gorun _bandwidth PAIRREQUEST` on a node: its side
// of an all_reduce with another node, as JSON on stdout.
func bandwidthPair(ctx context.Context, arg string, stdout io.Writer) error {
	var req preflight.PairRequest
	if err := json.Unmarshal([]byte(arg), &req); err != nil {
		return fmt.Errorf("%s: bad request: %w", preflight.BandwidthCommand, err)
	}
	bw := preflight.MeasurePair(ctx, preflight.BandwidthOptions{Python: torchrunPython(req.Torchrun), Environ: os.Environ()}, req)
	return json.NewEncoder(stdout).Encode(bw)
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
