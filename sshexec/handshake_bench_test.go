package sshexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testSSHServersEnv makes the test binary a process of n SSH servers on
// loopback (helper-process pattern), each with a host key of its own, so
// that a benchmark's own CPU (RUSAGE_SELF) is the head's alone.
const testSSHServersEnv = "GORUN_TEST_SSH_SERVERS"

// sshServersSpec is what the benchmark gives its servers' process.
type sshServersSpec struct {
	HostKeys   []string `json:"host_keys"`  // PEM, one per server
	Authorized string   `json:"authorized"` // the one client key, authorized_keys form
}

// sshServersHelper serves the spec in $GORUN_TEST_SSH_SERVERS: it prints
// the servers' ports as one JSON line, then accepts until stdin closes.
// Each connection gets the handshake, public-key auth, answers to its
// keepalives, and nothing else.
func sshServersHelper() int {
	var spec sshServersSpec
	b, err := os.ReadFile(os.Getenv(testSSHServersEnv))
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	want, _, _, _, err := ssh.ParseAuthorizedKey([]byte(spec.Authorized))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ports := make([]int, len(spec.HostKeys))
	for i, p := range spec.HostKeys {
		signer, err := ssh.ParsePrivateKey([]byte(p))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if string(k.Marshal()) == string(want.Marshal()) {
				return nil, nil
			}
			return nil, fmt.Errorf("unknown key")
		}}
		cfg.AddHostKey(signer)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		go acceptEach(ln, func(c net.Conn) {
			sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
			if err != nil {
				return
			}
			defer sc.Close()
			go func() {
				for ch := range chans {
					ch.Reject(ssh.Prohibited, "nothing runs here")
				}
			}()
			for r := range reqs {
				r.Reply(true, nil) // keepalive@openssh.com
			}
		})
	}
	out, _ := json.Marshal(ports)
	fmt.Printf("%s\n", out)
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// startSSHServers starts n servers in a process of their own and writes
// what a generated cluster's head holds to reach them: one ssh_config
// entry and one known_hosts line per node, and the client key.
func startSSHServers(b *testing.B, n int) ([]string, Config) {
	b.Helper()
	home := b.TempDir()
	b.Setenv("HOME", home)
	b.Setenv("SSH_AUTH_SOCK", "")
	client, clientPEM := newTestKey(b)
	spec := sshServersSpec{Authorized: string(ssh.MarshalAuthorizedKey(client.PublicKey()))}
	hostKeys := make([]ssh.PublicKey, n)
	for i := range n {
		s, p := newTestKey(b)
		hostKeys[i], spec.HostKeys = s.PublicKey(), append(spec.HostKeys, string(p))
	}
	specJSON, _ := json.Marshal(spec)
	specFile := writeFile(b, filepath.Join(home, "servers.json"), string(specJSON), 0o600)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), testSSHServersEnv+"="+specFile)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	var ports []int
	if err == nil {
		err = json.Unmarshal(line, &ports)
	}
	if err != nil || len(ports) != n {
		b.Fatalf("the servers did not start: %v (%d ports)", err, len(ports))
	}
	var conf, known strings.Builder
	names := make([]string, n)
	for i, port := range ports {
		names[i] = fmt.Sprintf("n%d", i)
		fmt.Fprintf(&conf, "Host %s\n  HostName 127.0.0.1\n  Port %d\n  User u\n", names[i], port)
		known.WriteString(knownhosts.Line([]string{fmt.Sprintf("[127.0.0.1]:%d", port)}, hostKeys[i]) + "\n")
	}
	return names, Config{
		SSHConfigFile: writeFile(b, filepath.Join(home, "ssh_config"), conf.String(), 0o600),
		KnownHosts:    writeFile(b, filepath.Join(home, "known_hosts"), known.String(), 0o600),
		Identity:      writeFile(b, filepath.Join(home, "id_ed25519"), string(clientPEM), 0o600),
	}
}

// BenchmarkDialAllHandshake is the head's cost per node of connecting to
// a generated cluster (one ssh_config entry, one known_hosts line and one
// host key per node), with real SSH handshakes and public-key auth
// against servers in another process. "bare" dials the same servers with
// golang.org/x/crypto/ssh alone (same key exchange, host key check
// against the same key, one signature): the handshake itself, which
// DialAll's cpu-ms/node exceeds by gorun's own work. heap-KB/node is the
// heap in use, after a GC, while every connection is open.
func BenchmarkDialAllHandshake(b *testing.B) {
	for _, n := range []int{32, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchmarkHandshakes(b, n) })
	}
}

func benchmarkHandshakes(b *testing.B, n int) {
	names, cfg := startSSHServers(b, n)
	b.Run("gorun", func(b *testing.B) {
		var heap, goroutines float64
		start := cpuTime()
		for b.Loop() {
			remotes, err := DialAll(context.Background(), names, cfg, DefaultFanout)
			if err != nil || len(remotes) != n {
				b.Fatalf("%d of %d connected: %v", len(remotes), n, err)
			}
			heap, goroutines = heapAndGoroutines(b, n)
			for _, r := range remotes {
				r.Close()
			}
		}
		reportPerNode(b, n, cpuTime()-start, heap, goroutines)
	})
	b.Run("bare", func(b *testing.B) {
		signer := identitySigner(b, cfg.Identity)
		known, err := knownhosts.New(cfg.KnownHosts)
		if err != nil {
			b.Fatal(err)
		}
		addrs := portsOf(b, cfg.SSHConfigFile)
		var heap, goroutines float64
		start := cpuTime()
		for b.Loop() {
			clients := make([]*ssh.Client, n)
			err := ForEach(context.Background(), names, DefaultFanout, func(_ context.Context, h string) error {
				var i int
				fmt.Sscanf(h, "n%d", &i)
				c, err := ssh.Dial("tcp", addrs[i], &ssh.ClientConfig{User: "u", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
					HostKeyCallback: known, Timeout: 10 * time.Second})
				clients[i] = c
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			heap, goroutines = heapAndGoroutines(b, n)
			for _, c := range clients {
				c.Close()
			}
		}
		reportPerNode(b, n, cpuTime()-start, heap, goroutines)
	})
}

func heapAndGoroutines(b *testing.B, n int) (heapKB, goroutines float64) {
	b.StopTimer()
	defer b.StartTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / 1024 / float64(n), float64(runtime.NumGoroutine()) / float64(n)
}

func reportPerNode(b *testing.B, n int, cpu time.Duration, heapKB, goroutines float64) {
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N*n), "cpu-ms/node")
	b.ReportMetric(float64(b.Elapsed())/float64(time.Millisecond)/float64(b.N*n), "wall-ms/node")
	b.ReportMetric(heapKB, "heap-KB/node")
	b.ReportMetric(goroutines, "goroutines/node")
	b.ReportMetric(0, "ns/op")
}

func identitySigner(b *testing.B, path string) ssh.Signer {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// portsOf reads back the address of each node nI from the generated
// ssh_config.
func portsOf(b *testing.B, path string) map[int]string {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	addrs := map[int]string{}
	var node int
	for _, l := range strings.Split(string(data), "\n") {
		var port int
		switch {
		case strings.HasPrefix(l, "Host n"):
			fmt.Sscanf(l, "Host n%d", &node)
		case strings.HasPrefix(l, "  Port "):
			fmt.Sscanf(l, "  Port %d", &port)
			addrs[node] = fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	return addrs
}
