package sshexec

import (
	"net"
	"os"
	"strings"
)

// IsLocalHost reports whether name is this machine: "localhost", a loopback
// address (127.0.0.0/8, ::1), this machine's host name (short or with a
// domain), or an address of one of its interfaces. Such a node runs with
// the Local runner, without SSH. Names are not resolved through DNS, so the
// answer is quick and does not depend on the resolver.
func IsLocalHost(name string) bool {
	name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
	if name == "" {
		return false
	}
	if strings.EqualFold(name, "localhost") || strings.HasSuffix(strings.ToLower(name), ".localhost") {
		return true
	}
	if ip := net.ParseIP(name); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return false
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(name, host) {
		return true
	}
	// "gpu1" vs "gpu1.cluster": the same machine when one is the other's
	// first label.
	short := func(s string) string { s, _, _ = strings.Cut(s, "."); return s }
	return (!strings.Contains(name, ".") || !strings.Contains(host, ".")) && strings.EqualFold(short(name), short(host))
}
