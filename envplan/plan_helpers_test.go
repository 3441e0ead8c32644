package envplan

import (
	"fmt"
	"strconv"
	"strings"
)

// The helpers below build specs the way the command-line parser would, so
// Build's tests do not depend on the parser.

// torchrunDefaults is torchrun 2.11's configuration with no options given.
func torchrunDefaults() Config {
	return Config{
		NNodesMin: 1, NNodesMax: 1,
		NProcPerNode:    "1",
		RdzvBackend:     "static",
		RdzvID:          "none",
		RdzvConfigs:     map[string]string{},
		MonitorInterval: 0.1,
		StartMethod:     "spawn",
		EventLogHandler: "null",
		Role:            "default",
		Redirects:       "0",
		Tee:             "0",
		MasterAddr:      "127.0.0.1",
		MasterPort:      29500,
		SignalsToHandle: "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
	}
}

// opt returns a torchrun option as the parser records it: "--name=value",
// or "--flag" for flags.
func opt(s string) Arg {
	name, value, hasValue := strings.Cut(s, "=")
	return Arg{
		Name:   name,
		Dest:   strings.ReplaceAll(strings.TrimLeft(name, "-"), "-", "_"),
		Value:  value,
		IsFlag: !hasValue,
	}
}

// newSpec builds a spec from torchrun options, the script and its
// arguments, applying each option to the configuration as torchrun would.
func newSpec(options []string, script string, args ...string) Spec {
	cl := CommandLine{Torchrun: torchrunDefaults()}
	c := &cl.Torchrun
	for _, o := range options {
		a := opt(o)
		cl.Given = append(cl.Given, a)
		atoi := func() int {
			n, err := strconv.Atoi(a.Value)
			if err != nil {
				panic(fmt.Sprintf("test option %s: %v", o, err))
			}
			return n
		}
		switch a.Dest {
		case "nnodes":
			lo, hi, isRange := strings.Cut(a.Value, ":")
			if !isRange {
				hi = lo
			}
			c.NNodesMin, _ = strconv.Atoi(lo)
			c.NNodesMax, _ = strconv.Atoi(hi)
		case "nproc_per_node":
			c.NProcPerNode = a.Value
		case "rdzv_backend":
			c.RdzvBackend = a.Value
		case "rdzv_endpoint":
			c.RdzvEndpoint = a.Value
		case "rdzv_id":
			c.RdzvID = a.Value
		case "standalone":
			c.Standalone = true
			c.RdzvBackend, c.RdzvEndpoint, c.RdzvID = "c10d", "localhost:0", "f2e03d02-f82d-4185-b5d1-03dbaa8ee4e1"
		case "max_restarts":
			c.MaxRestarts = atoi()
		case "node_rank":
			c.NodeRank = atoi()
		case "master_addr":
			c.MasterAddr = a.Value
		case "master_port":
			c.MasterPort = atoi()
		case "tee":
			c.Tee = a.Value
		case "redirects":
			c.Redirects = a.Value
		case "numa_binding":
			c.NumaBinding = a.Value
		case "run_path":
			c.RunPath = true
		case "module":
			c.Module = true
		case "no_python":
			c.NoPython = true
		default:
			panic("test helper does not know option " + o)
		}
	}
	// As torchrun's config_from_args: a static rendezvous records the node
	// rank and, without an endpoint, takes master_addr:master_port.
	if c.RdzvBackend == "static" {
		c.RdzvConfigs["rank"] = strconv.Itoa(c.NodeRank)
		if c.RdzvEndpoint == "" {
			c.RdzvEndpoint = c.MasterAddr + ":" + strconv.Itoa(c.MasterPort)
		}
	}
	c.TrainingScript = script
	c.TrainingScriptArgs = args
	return Spec{CommandLine: cl, Environ: map[string]string{}}
}

// hosts parses "a:8,b:8" (slots optional) into hosts.
func hosts(list string) []Host {
	var hs []Host
	for h := range strings.SplitSeq(list, ",") {
		name, slots, _ := strings.Cut(h, ":")
		n, _ := strconv.Atoi(slots)
		hs = append(hs, Host{Name: name, Slots: n})
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
