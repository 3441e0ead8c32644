package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/internal/userr"
)

// runHosts is `gorun hosts`: the resolved host list, in launch order.
func runHosts(args []string, out io.Writer) error {
	opts, asJSON, err := hostsArgs(args)
	if err != nil {
		if errors.Is(err, cmdline.ErrHelp) {
			_, err = io.WriteString(out, hostsUsage)
		}
		return err
	}
	nodes, err := job.ResolveHosts(opts, os.Getenv)
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return &userr.InputError{Where: "gorun hosts",
			Problem: "nothing to list: no --hosts, no --hostfile, and no Slurm allocation in this environment (SLURM_JOB_NODELIST is not set)",
			Fix:     "give --hosts h1:8,h2:8 or --hostfile FILE, or run it inside salloc or sbatch"}
	}
	if asJSON {
		return writeJSON(out, hostsJSON{schema.NewStamp(schema.Hosts, os.Getenv), nodes})
	}
	for _, h := range nodes {
		fmt.Fprintln(out, h.Describe())
	}
	return nil
}

// hostsCommand is `gorun hosts`'s command line, in the launch grammar.
// hostsJSON is what `gorun hosts --json` prints
// (docs/schema/gorun.hosts-1.json).
type hostsJSON struct {
	schema.Stamp
	Hosts []hosts.Host `json:"hosts"`
}

func hostsCommand() cmdline.Subcommand {
	return cmdline.Subcommand{Name: "hosts", Options: []cmdline.SubOption{
		{Name: "--hosts"}, {Name: "--hostfile"}, {Name: "--include"}, {Name: "--exclude"}, {Name: "--json", Flag: true}}}
}

// hostsArgs reads `gorun hosts`'s options.
func hostsArgs(args []string) (opts cmdline.Options, asJSON bool, err error) {
	v, rest, err := cmdline.ParseSubcommand(args, hostsCommand())
	if err != nil {
		return opts, false, err
	}
	if len(rest) > 0 {
		return opts, false, &userr.InputError{Where: "gorun hosts", Problem: fmt.Sprintf("takes no arguments, and %q was given", rest[0]),
			Fix: "it takes --hosts, --hostfile, --include, --exclude and --json; gorun hosts --help explains them"}
	}
	opts = cmdline.Options{Hosts: v["--hosts"], Hostfile: v["--hostfile"], Include: v["--include"], Exclude: v["--exclude"]}
	return opts, v["--json"] == "true", nil
}
