package job

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/preflight"
)

// Per-pod mode: something other than gorun (Kubernetes, with one pod per
// node: Kubeflow's PyTorchJob, a Trainer v2 TrainJob on JobSet) starts one
// gorun on every node and gives each the job's shape in torchrun's own
// PET_* variables. Each gorun is then its node's torchrun, as `srun gorun`
// is in a Slurm step: it checks, plans and supervises this node alone.

// perPod reports whether the command line makes this gorun one node of
// several that it does not start itself: more than one node, or a node
// rank, given on argv or through PET_NNODES / PET_NODE_RANK.
func perPod(cl cmdline.CommandLine) bool {
	return !cl.Torchrun.Standalone && (cl.Torchrun.NNodesMax > 1 || cl.Set("node_rank"))
}

// MasterWaitHook names the test hook that shortens the probe's wait
// (seconds); for tests only.
const MasterWaitHook = "GORUN_MASTER_TEST_WAIT_S"

// Default ports of torchrun's rendezvous endpoints without one.
const (
	defaultStaticPort = 29500
	defaultC10dPort   = 29400
)

// podMaster is the rendezvous store a per-pod node must reach on another
// node, and false when there is none to probe: with the static rendezvous
// (Kubeflow's) node 0's torchrun holds the store, so node 0 has nothing to
// probe; with c10d the store is on the node the endpoint names, which may
// be this one (here reports that); other backends are not probed.
func podMaster(cl cmdline.CommandLine, getenv func(string) string, here func(host string) bool) (preflight.MasterProbe, bool) {
	c := cl.Torchrun
	var p preflight.MasterProbe
	switch {
	case c.Standalone:
		return p, false
	case c.RdzvBackend == "static":
		if c.NodeRank == 0 {
			return p, false
		}
		if cl.Set("rdzv_endpoint") {
			host, port := splitHostPort(c.RdzvEndpoint, defaultStaticPort)
			p.Addr, p.From = net.JoinHostPort(host, port), givenAs(cl, "rdzv_endpoint")
			break
		}
		host := c.MasterAddr
		if host == "" {
			host = "127.0.0.1" // torchrun's default --master-addr
		}
		port := c.MasterPort
		if port == 0 {
			port = defaultStaticPort
		}
		p.Addr = net.JoinHostPort(host, strconv.Itoa(port))
		p.From = givenAs(cl, "master_addr") + ", " + givenAs(cl, "master_port")
	case c.RdzvBackend == "c10d":
		host, port := splitHostPort(c.RdzvEndpoint, defaultC10dPort)
		if host == "" || here(host) {
			return p, false
		}
		p.Addr, p.From = net.JoinHostPort(host, port), givenAs(cl, "rdzv_endpoint")
	default:
		return p, false
	}
	if s, err := strconv.ParseFloat(getenv(MasterWaitHook), 64); err == nil && s > 0 {
		p.Wait = time.Duration(s * float64(time.Second))
	}
	return p, true
}

// givenAs names how the torchrun option with this dest was set:
// "PET_MASTER_ADDR", "--master-addr", or torchrun's default.
func givenAs(cl cmdline.CommandLine, dest string) string {
	for _, a := range cl.Given {
		if a.Dest == dest && a.FromEnv {
			return "PET_" + strings.ToUpper(dest)
		} else if a.Dest == dest {
			return a.Name
		}
	}
	return "torchrun's default " + "--" + strings.ReplaceAll(dest, "_", "-")
}

// splitHostPort reads HOST, HOST:PORT or [IPV6]:PORT (cmdline has checked
// the form), with def as the port when none is given.
func splitHostPort(ep string, def int) (host, port string) {
	if h, p, err := net.SplitHostPort(ep); err == nil {
		return h, p
	}
	return strings.Trim(ep, "[]"), strconv.Itoa(def)
}

// thisMachine reports whether host names this machine: localhost, a
// loopback address, its host name, or a name or address that resolves to
// one of its interfaces' addresses (torchrun's c10d backend starts the
// store on such a node). A name that does not resolve (yet) is not this
// machine's.
func thisMachine(ctx context.Context, host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if name, err := os.Hostname(); err == nil && strings.EqualFold(host, name) {
		return true
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return false
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	own, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range own {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// podLine is the one line a per-pod gorun says at start: what it runs,
// where this node stands in the job, and that the others are not its.
func podLine(cl cmdline.CommandLine) string {
	c := cl.Torchrun
	nodes := strconv.Itoa(c.NNodesMax)
	if c.NNodesMin != c.NNodesMax {
		nodes = fmt.Sprintf("%d to %d", c.NNodesMin, c.NNodesMax)
	}
	var where string
	switch {
	case c.RdzvBackend == "static" && cl.Set("rdzv_endpoint"):
		where = fmt.Sprintf("node %d of %s (%s), store %s (%s)", c.NodeRank, nodes, givenAs(cl, "node_rank"), c.RdzvEndpoint, givenAs(cl, "rdzv_endpoint"))
	case c.RdzvBackend == "static":
		addr := c.MasterAddr
		if addr == "" {
			addr = "127.0.0.1"
		}
		where = fmt.Sprintf("node %d of %s (%s), master %s (%s)", c.NodeRank, nodes, givenAs(cl, "node_rank"),
			net.JoinHostPort(addr, strconv.Itoa(c.MasterPort)), givenAs(cl, "master_addr"))
	default:
		where = fmt.Sprintf("one of %s nodes, ranked by the %s rendezvous at %s", nodes, c.RdzvBackend, c.RdzvEndpoint)
	}
	others := "the other node runs its own gorun"
	if c.NNodesMax > 2 || c.NNodesMin != c.NNodesMax {
		others = "the other nodes run their own gorun"
	}
	return fmt.Sprintf("gorun: runs per pod: torchrun on this node only, as %s; %s, outside this one's reach", where, others)
}
