package envplan

import (
	"fmt"
	"net"
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

// WithMasterPort returns a copy of the plan whose nodes meet at port instead:
// for a group restart when the old port is still held. The original plan
// is not changed.
func (p Plan) WithMasterPort(port int) Plan {
	old, ok := p.MasterPort()
	if !ok || old == port {
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
		env := make(map[string]Var, len(n.Env))
		for k, v := range n.Env {
			env[k] = v
		}
		if v, ok := env["MASTER_PORT"]; ok {
			v.Value = strconv.Itoa(port)
			v.Reason = fmt.Sprintf("port %d was still held when the group restarted", old)
			env["MASTER_PORT"] = v
		}
		n.Env = env
		q.Nodes[i] = n
	}
	return q
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
