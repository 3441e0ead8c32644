package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/job"
)

// runHosts is `gorun hosts`: the resolved host list, in launch order.
func runHosts(args []string, out io.Writer) error {
	opts, asJSON, err := hostsArgs(args)
	if err != nil {
		if err == envplan.ErrHelp {
			_, err = io.WriteString(out, hostsUsage)
		}
		return err
	}
	hosts, err := job.ResolveHosts(opts, os.Getenv)
	if err != nil {
		return err
	}
	if hosts == nil {
		hosts = []envplan.Host{}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(hosts)
	}
	for _, h := range hosts {
		slots := "?"
		if h.Slots > 0 {
			slots = strconv.Itoa(h.Slots)
		}
		gpus := "all"
		if h.GPUs != nil {
			gpus = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(h.GPUs)), ","), "[]")
		}
		fmt.Fprintf(out, "%s\tslots=%s\tgpus=%s\n", h.Name, slots, gpus)
	}
	return nil
}

// hostsArgs reads `gorun hosts`'s options.
func hostsArgs(args []string) (opts envplan.Options, asJSON bool, err error) {
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		switch name {
		case "-h", "--help":
			return opts, false, envplan.ErrHelp
		case "--json":
			asJSON = true
			continue
		case "--hosts", "--hostfile", "--include", "--exclude":
		default:
			return opts, false, &envplan.InputError{Where: "gorun hosts " + args[i], Problem: "is not an option of gorun hosts",
				Fix: "it takes --hosts, --hostfile, --include, --exclude and --json; gorun hosts --help explains them"}
		}
		if !hasValue {
			if i+1 >= len(args) {
				return opts, false, &envplan.InputError{Where: "gorun hosts " + name, Problem: "expected one argument", Fix: "gorun hosts --help"}
			}
			i++
			value = args[i]
		}
		switch name {
		case "--hosts":
			opts.Hosts = value
		case "--hostfile":
			opts.Hostfile = value
		case "--include":
			opts.Include = value
		case "--exclude":
			opts.Exclude = value
		}
	}
	return opts, asJSON, nil
}
