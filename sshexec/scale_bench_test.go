package sshexec

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"
)

// refusedPort returns a loopback port nothing listens on: a connection to
// it is refused at once.
func refusedPort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// scaleCluster writes what a generated cluster's head holds: one
// ssh_config entry and one known_hosts line per node, each node its own
// loopback address (127.0.x.y) on a refused port. It returns the node
// names and the Config that reaches them.
func scaleCluster(tb testing.TB, n int) ([]string, Config) {
	tb.Helper()
	home := tb.TempDir()
	tb.Setenv("HOME", home)
	tb.Setenv("SSH_AUTH_SOCK", "")
	key, _ := newTestKey(tb)
	port := refusedPort(tb)
	var conf, known strings.Builder
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("n%d", i)
		addr := fmt.Sprintf("127.0.%d.%d", i/250, i%250+1)
		fmt.Fprintf(&conf, "Host %s\n  HostName %s\n  Port %d\n  User u\n", names[i], addr, port)
		known.WriteString(knownhosts.Line([]string{fmt.Sprintf("[%s]:%d", addr, port)}, key.PublicKey()) + "\n")
	}
	cfg := Config{
		SSHConfigFile: writeFile(tb, filepath.Join(home, "ssh_config"), conf.String(), 0o600),
		KnownHosts:    writeFile(tb, filepath.Join(home, "known_hosts"), known.String(), 0o600),
	}
	return names, cfg
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDialAllRefused is the head's own cost per node of a fan-out
// over a generated cluster (one ssh_config entry and one known_hosts line
// per node), every node refusing the connection: what is left is reading
// the inputs, resolving each host, preparing its host keys and auth, and
// the refused TCP connect. cpu-ms/node is the process's CPU (user+system)
// per node; it should not grow with N.
func BenchmarkDialAllRefused(b *testing.B) {
	for _, n := range []int{32, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			names, cfg := scaleCluster(b, n)
			var lines int
			start := cpuTime()
			for b.Loop() {
				remotes, err := DialAll(context.Background(), names, cfg, DefaultFanout)
				if err == nil || len(remotes) != 0 {
					b.Fatalf("every node must be refused: %d connected, err %v", len(remotes), err)
				}
				lines = strings.Count(err.Error(), "\n") + 1
			}
			cpu := cpuTime() - start
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N*n), "cpu-ms/node")
			b.ReportMetric(float64(b.Elapsed())/float64(time.Millisecond)/float64(b.N*n), "wall-ms/node")
			b.ReportMetric(float64(lines), "error-lines")
			b.ReportMetric(0, "ns/op")
		})
	}
}
