package envplan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
)

// newSpec builds a spec from torchrun options, the script and its arguments
// with the real command-line parser; --standalone gets a fixed run id.
func newSpec(options []string, script string, args ...string) Spec {
	argv := append(append(slices.Clone(options), script), args...)
	cl, err := cmdline.ParseWith(argv, nil, func() string { return "f2e03d02-f82d-4185-b5d1-03dbaa8ee4e1" })
	if err != nil {
		panic(fmt.Sprintf("test spec %q: %v", argv, err))
	}
	return Spec{CommandLine: cl, Environ: map[string]string{}}
}

// testHosts parses "a:8,b:8" (slots optional) into hosts.
func testHosts(list string) []hosts.Host {
	var hs []hosts.Host
	for h := range strings.SplitSeq(list, ",") {
		name, slots, _ := strings.Cut(h, ":")
		n, _ := strconv.Atoi(slots)
		hs = append(hs, hosts.Host{Name: name, Slots: n})
	}
	return hs
}

// dgxFacts describes an 8-GPU node with two NUMA nodes of 48 cores and
// their hyperthread siblings, GPUs 0-3 on node 0 and 4-7 on node 1.
func dgxFacts(iface, addr string) NodeFacts {
	f := NodeFacts{
		Hostname:  "node",
		CPUs:      "0-191",
		Interface: iface,
		Address:   addr,
		IBPorts:   []string{"mlx5_0:1", "mlx5_1:1"},
		Gorun:     testGorun,
		Python:    testPython,
	}
	for i := range 8 {
		g := GPU{Index: i, BusID: fmt.Sprintf("0000:%02x:00.0", 0x18+i*0x10), NUMANode: 0, CPUs: "0-47,96-143"}
		if i >= 4 {
			g.NUMANode, g.CPUs = 1, "48-95,144-191"
		}
		f.GPUs = append(f.GPUs, g)
	}
	return f
}

// smallFacts describes a node with n GPUs on one NUMA node of 16 CPUs.
func smallFacts(n int, iface, addr string) NodeFacts {
	f := NodeFacts{CPUs: "0-15", Interface: iface, Address: addr, Gorun: testGorun, Python: testPython}
	for i := range n {
		f.GPUs = append(f.GPUs, GPU{Index: i, NUMANode: 0, CPUs: "0-15"})
	}
	return f
}

// Where the test nodes have gorun and the interpreter torchrun runs workers
// with, for the worker-start hook that binds CPUs.
const (
	testGorun  = "/opt/gorun/gorun"
	testPython = "/usr/bin/python3"
)
