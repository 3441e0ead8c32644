package cmdline

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
)

// checkEndpoint checks a --rdzv-endpoint the way the backends built into
// torchrun read it (parse_rendezvous_endpoint, then the backend), more
// strictly where torchrun's reading is ambiguous: HOST, HOST:PORT or
// [IPV6]:PORT, HOST a valid host name or address (see hosts.CheckName),
// PORT 0 to 65535. The static backend needs a port, and not 0; port 0 (the
// OS picks one, as --standalone does) is for a single-node c10d
// rendezvous only, since no other node could learn the port. An IPv6
// address with a port must be in brackets: "::1:29500" is itself an
// address. Endpoints of other backends (plugins) are their own business.
func checkEndpoint(s setting, backend string, nnodesMax int) error {
	switch backend {
	case "static", "c10d", "etcd", "etcd-v2":
	default:
		return nil
	}
	bad := func(problem, fix string) error {
		return &userr.InputError{Where: s.where, Problem: problem, Fix: fix}
	}
	ep := pyStrip(s.value)
	if ep == "" {
		return bad("the rendezvous endpoint is empty", "give the store's host and port, e.g. node1:29500, or leave --rdzv-endpoint out")
	}
	host, port, hasPort := ep, "", false
	switch {
	case strings.HasPrefix(ep, "["):
		end := strings.IndexByte(ep, ']')
		if end < 0 {
			return bad(fmt.Sprintf("unclosed '[' in %s", userr.Quote(ep)), "write an IPv6 endpoint as [ADDRESS]:PORT, e.g. [::1]:29500")
		}
		host = ep[1:end]
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return bad(fmt.Sprintf("%s in brackets is not an IPv6 address", userr.Quote(host)), "use brackets only around IPv6 addresses")
		}
		switch rest := ep[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			port, hasPort = rest[1:], true
		default:
			return bad(fmt.Sprintf("unexpected %s after ']'", userr.Quote(rest)), "write [ADDRESS]:PORT")
		}
	case strings.Count(ep, ":") > 1:
		return bad(fmt.Sprintf("%s has more than one ':'", userr.Quote(ep)), "put an IPv6 address in brackets: [::1]:29500")
	default:
		host, port, hasPort = strings.Cut(ep, ":")
		if host == "" {
			return bad(fmt.Sprintf("%s has no host before ':'", userr.Quote(ep)), "write HOST:PORT, e.g. node1:29500")
		}
	}
	if err := hosts.CheckName(s.where, host); err != nil {
		return err
	}
	if !hasPort {
		if backend == "static" {
			return bad(fmt.Sprintf("%s has no port, and the static rendezvous needs one", userr.Quote(ep)), "write HOST:PORT, or use --master-addr and --master-port")
		}
		return nil
	}
	n, err := strconv.Atoi(port)
	if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" || err != nil || n > 65535 {
		return bad(fmt.Sprintf("the port of %s is not a number from 0 to 65535", userr.Quote(ep)), "write HOST:PORT, e.g. node1:29500")
	}
	if n == 0 && (backend != "c10d" || nnodesMax > 1) {
		return bad(fmt.Sprintf("port 0 in %s lets the store listen on a port that no other node learns", userr.Quote(ep)),
			"give a port number; port 0 suits only a single-node c10d rendezvous (as --standalone uses)")
	}
	return nil
}
