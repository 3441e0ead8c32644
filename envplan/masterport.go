package envplan

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// MasterPort returns the port of the static rendezvous store gorun placed on
// node 0 (the --master_port it wrote), and false when the plan has none:
// local mode, a user endpoint, or another rendezvous backend.
func (p Plan) MasterPort() (int, bool) {
	if len(p.Nodes) == 0 {
		return 0, false
	}
	for _, a := range p.Nodes[0].Command {
		if v, ok := strings.CutPrefix(a, "--master_port="); ok {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
	}
	return 0, false
}

// WithMasterPort returns a copy of the plan whose nodes meet at port
// instead, why being the reason MASTER_PORT gets: for a group restart
// while the old port is still held, or while the old attempt's torchrun
// still stops. A plan of one local node whose torchrun takes its default
// port (MasterPort is false) gets --master_port=port before
// --max_restarts=0; any other plan without a gorun-placed port is
// returned as it is. The original plan is not changed.
func (p Plan) WithMasterPort(port int, why string) Plan {
	old, ok := p.MasterPort()
	insert := false
	if !ok {
		old, insert = p.defaultPort()
	}
	if (!ok && !insert) || old == port {
		return p
	}
	q := p
	q.Config.MasterPort = port
	q.Config.RdzvEndpoint = fmt.Sprintf("%s:%d", q.Config.MasterAddr, port)
	q.Nodes = make([]NodePlan, len(p.Nodes))
	for i, n := range p.Nodes {
		n.Command = append([]string(nil), n.Command...)
		for j, a := range n.Command {
			if a == "--master_port="+strconv.Itoa(old) {
				n.Command[j] = "--master_port=" + strconv.Itoa(port)
			}
		}
		if insert {
			j := slices.Index(n.Command, "--max_restarts=0") // defaultPort found it
			n.Command = slices.Insert(n.Command, j, "--master_port="+strconv.Itoa(port))
		}
		env := make(map[string]Var, len(n.Env))
		for k, v := range n.Env {
			env[k] = v
		}
		if v, ok := env["MASTER_PORT"]; ok {
			v.Value = strconv.Itoa(port)
			v.Reason = why
			env["MASTER_PORT"] = v
		}
		n.Env = env
		q.Nodes[i] = n
	}
	return q
}

// defaultPort returns the port of a plan of one local node whose
// torchrun meets at torchrun's default store (static rendezvous, no port
// or endpoint on its command line): what WithMasterPort may place
// there.
func (p Plan) defaultPort() (int, bool) {
	if len(p.Nodes) != 1 || p.Config.RdzvBackend != "static" || p.Config.Standalone || p.Config.MasterPort == 0 {
		return 0, false
	}
	if !slices.Contains(p.Nodes[0].Command, "--max_restarts=0") {
		return 0, false
	}
	for _, a := range p.Nodes[0].Command {
		for _, flag := range []string{"--master_port", "--master-port", "--rdzv_endpoint", "--rdzv-endpoint"} {
			if strings.HasPrefix(a, flag) {
				return 0, false
			}
		}
	}
	return p.Config.MasterPort, true
}

// StorePort returns the port the plan's static rendezvous store listens
// on where gorun may move it (WithMasterPort): the one gorun placed, or
// torchrun's default on one local node.
func (p Plan) StorePort() (int, bool) {
	if port, ok := p.MasterPort(); ok {
		return port, true
	}
	return p.defaultPort()
}

// StoreAddr returns the address ("host:port") of the static rendezvous
// store gorun placed on node 0, as node 0's torchrun is told it, and false
// when the plan has none (see MasterPort).
func (p Plan) StoreAddr() (string, bool) {
	port, ok := p.MasterPort()
	if !ok {
		return "", false
	}
	for _, a := range p.Nodes[0].Command {
		if host, ok := strings.CutPrefix(a, "--master_addr="); ok {
			return net.JoinHostPort(host, strconv.Itoa(port)), true
		}
	}
	return "", false
}
