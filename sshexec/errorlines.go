package sshexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/lazyre"
)

// collapseAbove is how many failing nodes a fan-out's error lists one line
// each. Beyond it, nodes that failed the same way share a line that counts
// them and names them as a compressed host list, followed by the first
// one's own line as an example:
//
//	1024 nodes refused the connection: n[0-1023]
//	  e.g. node n0: connect to 127.0.0.1:22: dial tcp 127.0.0.1:22: connect: connection refused
//
// so a launch on thousands of unreachable nodes says so in a few lines.
// Causes shared by fewer than collapseGroup nodes keep their own lines.
const collapseAbove = 8

// collapseGroup is the fewest nodes that share a line once collapsing.
const collapseGroup = 3

// oneLinePerError is the ErrorFormat of ForEach's multierror: one line per
// failing host, without go-multierror's "N errors occurred:" header, tab
// indent and trailing blank line (main escapes the tab, so a user saw
// "\x09* node ..."). A cause of several lines is folded onto its host's
// line, so each line stays one host's whole story. Past collapseAbove
// failing hosts, hosts that failed alike share a line.
func oneLinePerError(errs []error) string {
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = foldLines(err.Error())
	}
	if len(errs) <= collapseAbove {
		return strings.Join(lines, "\n")
	}
	return strings.Join(collapse(errs, lines), "\n")
}

func foldLines(msg string) string {
	var parts []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// collapse groups errs (with their lines) by how they failed, in order of
// first appearance.
func collapse(errs []error, lines []string) []string {
	type group struct {
		phrase string
		hosts  []string
		idx    []int
	}
	var order []*group
	byKey := map[string]*group{}
	for i, err := range errs {
		var he *HostError
		if !errors.As(err, &he) {
			order = append(order, &group{idx: []int{i}}) // no host to count: as it is
			continue
		}
		phrase, key := failureKind(err, he.Host)
		g := byKey[key]
		if g == nil {
			g = &group{phrase: phrase}
			byKey[key] = g
			order = append(order, g)
		}
		g.hosts = append(g.hosts, he.Host)
		g.idx = append(g.idx, i)
	}
	var out []string
	for _, g := range order {
		if len(g.idx) < collapseGroup {
			for _, i := range g.idx {
				out = append(out, lines[i])
			}
			continue
		}
		out = append(out, fmt.Sprintf("%d nodes %s: %s", len(g.hosts), g.phrase, hosts.Compress(g.hosts)),
			"  e.g. "+lines[g.idx[0]])
	}
	return out
}

// addrPattern matches what differs from node to node in the same failure:
// an IPv4 or bracketed address with an optional port, or a lone port.
var addrPattern = lazyre.New(`\[[0-9A-Fa-f:.%a-zA-Z]*\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|:\d+\b`)

// failureKind names how a node failed, for the line it shares with others
// that failed alike, and returns the key that groups them: a known cause
// by its kind alone, any other by its message with the node's own name and
// addresses taken out.
func failureKind(err error, host string) (phrase, key string) {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused the connection", "refused"
	case errors.Is(err, ErrUnknownHost):
		return "offered a host key that is not in known_hosts", "unknown host key"
	case errors.Is(err, ErrHostKeyChanged):
		return "offered a host key other than the one known_hosts holds (HOST KEY CHANGED)", "changed host key"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "are unreachable (no route to them)", "unreachable"
	case errors.As(err, &dns) && dns.IsNotFound:
		return "have names that do not resolve", "not found"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "did not answer in time", "timeout"
	case errors.Is(err, context.Canceled):
		return "were given up on (cancelled)", "cancelled"
	}
	msg := foldLines(err.Error())
	if host != "" {
		msg = strings.ReplaceAll(msg, host, "\x00")
	}
	return "failed alike", "other\x00" + addrPattern().ReplaceAllString(msg, "\x01")
}
