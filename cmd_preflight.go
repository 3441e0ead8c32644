package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/inputfile"
	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/preflight"
)

// preflightUsage is `gorun preflight --help`.
const preflightUsage = `usage: gorun preflight [--json] [gorun options] [torchrun options] [script]
       gorun preflight [--json] --topo-file FILE

Checks every node the job would run on (the same --hosts, --hostfile or
Slurm allocation, and the same torchrun options), in parallel, and prints
each finding with its evidence and a remedy. Nothing is started. Exits 0
when no check failed; 3 when only checks of the nodes' health failed (or a
node could not be reached: another node may pass); 2 when a check of what
the job asks or brings failed (--torchrun, torch, GPUs asked of a node with
none), or on bad input. The report's "fault" says which: node or input.

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
			return writeJSON(stdout, topologyJSON{schema.NewStamp(schema.Topology, os.Getenv), rep})
		}
		rep.WriteText(stdout)
		return nil
	}
	cl, _, err := job.ParseLaunch(ctx, append(rest, "-"), os.Getenv, exec.LookPath) // the script is optional here
	if err != nil {
		return err
	}
	if cl.Torchrun.TrainingScript == "-" {
		cl.Torchrun.TrainingScript = ""
	}
	if bandwidth != "" {
		cl.Gorun.PreflightBandwidth = bandwidth
	}
	cfg, err := jobConfig(rest, cl)
	if err != nil {
		return err
	}
	report, err := job.Preflight(ctx, cfg, jobUI(stdout, stderr, nil))
	if err != nil {
		return err
	}
	if asJSON {
		err = writeJSON(stdout, preflightJSON{schema.NewStamp(schema.Preflight, os.Getenv), report})
	} else {
		report.WriteText(stdout)
	}
	if err == nil && !report.OK {
		return job.PreflightError(report)
	}
	return err
}

// preflightCommand is `gorun preflight`'s own options, before the launch
// command line, in its grammar.
func preflightCommand() cmdline.Subcommand {
	return cmdline.Subcommand{Name: "preflight", Launch: true, Options: []cmdline.SubOption{
		{Name: "--json", Flag: true},
		{Name: "--bandwidth", Choices: []string{preflight.BandwidthNode, preflight.BandwidthAll},
			Fix: "--bandwidth node (each node) or --bandwidth all (and between nodes)"},
		{Name: "--topo-file", Fix: "--topo-file FILE, the saved output of `nvidia-smi topo -m`"}}}
}

// preflightArgs takes preflight's own options out of args. topoFile is nil
// when --topo-file was not given.
func preflightArgs(args []string) (asJSON bool, topoFile *string, bandwidth string, rest []string, err error) {
	v, rest, err := cmdline.ParseSubcommand(args, preflightCommand())
	if err != nil {
		return false, nil, "", nil, err
	}
	if f, ok := v["--topo-file"]; ok {
		topoFile = &f
	}
	return v["--json"] == "true", topoFile, v["--bandwidth"], rest, nil
}

// preflightJSON is what `gorun preflight --json` prints
// (docs/schema/gorun.preflight-1.json).
type preflightJSON struct {
	schema.Stamp
	preflight.Report
}

// topologyJSON is what `gorun preflight --topo-file FILE --json` prints
// (docs/schema/gorun.topology-1.json).
type topologyJSON struct {
	schema.Stamp
	preflight.TopoReport
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
