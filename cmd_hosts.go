package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/inputfile"
	"github.com/gorun/gorun/internal/userr"
)

// runHosts prints the resolved host list.
func runHosts(opts cmdline.Options, asJSON bool, out io.Writer) error {
	list, err := resolveHosts(opts)
	if err != nil {
		return err
	}
	if list == nil {
		list = []hosts.Host{}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	for _, h := range list {
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

func resolveHosts(opts cmdline.Options) ([]hosts.Host, error) {
	var data []byte
	if opts.Hostfile != "" && opts.Hosts == "" { // both: hosts.Resolve says they exclude each other
		var err error
		if data, err = inputfile.Read(opts.Hostfile, inputfile.DefaultMax); err != nil {
			return nil, &userr.InputError{Where: "--hostfile", Problem: err.Error(),
				Fix: "give the path of a readable hostfile"}
		}
	}
	return hosts.Resolve(opts.Hosts, opts.Hostfile, data, opts.Include, opts.Exclude, os.Getenv)
}

// environ returns the process environment as a map.
func environ() map[string]string {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
