package sshexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// countingAgent is testAgent behind a listener that counts connections.
func countingAgent(t *testing.T) (sock string, conns *atomic.Int32) {
	t.Helper()
	inner := testAgent(t)
	sock = filepath.Join(t.TempDir(), "counting.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				up, err := net.Dial("unix", inner)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { copyConn(up, c) }()
				copyConn(c, up)
			}()
		}
	}()
	return sock, conns
}

func copyConn(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestDialAllSharesInputs: one fan-out connects to ssh-agent once, and
// with accept-new records a host key that every dial meets (here a
// HostKeyAlias all nodes share) once: each dial sees what an earlier one
// recorded.
func TestDialAllSharesInputs(t *testing.T) {
	home := isolate(t)
	sock, conns := countingAgent(t)
	t.Setenv("SSH_AUTH_SOCK", sock)
	serverKey, _ := newTestKey(t)
	port := testSSHServer(t, serverKey)
	var conf strings.Builder
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("n%d", i))
		fmt.Fprintf(&conf, "Host n%d\n  HostName 127.0.0.1\n  Port %d\n  User u\n  HostKeyAlias cluster\n", i, port)
	}
	kh := filepath.Join(home, "known_hosts")
	cfg := Config{
		SSHConfigFile: writeFile(t, filepath.Join(home, "ssh_config"), conf.String(), 0o600),
		KnownHosts:    kh,
		AcceptNew:     true,
	}
	remotes, err := DialAll(context.Background(), names, cfg, 8)
	closeRemotes(remotes)
	if err != nil {
		t.Fatal(err)
	}
	if len(remotes) != len(names) {
		t.Fatalf("%d of %d connected", len(remotes), len(names))
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections to ssh-agent for %d dials, want 1", n, len(names))
	}
	b, err := os.ReadFile(kh)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 1 || !strings.HasPrefix(string(b), "[cluster]:") {
		t.Errorf("known_hosts holds %d lines, want the shared alias recorded once:\n%s", n, b)
	}
	// A fan-out that ended left nothing behind: the next one reads again.
	if err := os.WriteFile(kh, []byte(knownhosts.Line([]string{fmt.Sprintf("[cluster]:%d", port)}, mustKey(t).PublicKey())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remotes, err = DialAll(context.Background(), names[:1], cfg, 0)
	closeRemotes(remotes)
	if !errors.Is(err, ErrHostKeyChanged) {
		t.Errorf("after known_hosts changed between fan-outs: err = %v, want a changed key", err)
	}
}

func mustKey(t *testing.T) ssh.Signer {
	k, _ := newTestKey(t)
	return k
}

// TestRecordSeesAnotherWriter: accept-new decides on the file as it is
// under its lock, not on the copy read at the start of the fan-out, so a
// key another process recorded meanwhile counts.
func TestRecordSeesAnotherWriter(t *testing.T) {
	key, other := mustKey(t), mustKey(t)
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.5"), Port: 22}
	tests := []struct {
		name    string
		written ssh.PublicKey // what the other writer records for node1
		want    error
		lines   int
	}{
		{name: "same key: accepted, not written twice", written: key.PublicKey(), lines: 2},
		{name: "another key: refused as changed", written: other.PublicKey(), want: ErrHostKeyChanged, lines: 2},
		{name: "nothing written: recorded", lines: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "known_hosts")
			// No final newline: the line count must survive the append.
			seed := knownhosts.Line([]string{"node0"}, other.PublicKey())
			if err := os.WriteFile(file, []byte(seed), 0o600); err != nil {
				t.Fatal(err)
			}
			hk := &hostKeys{userFiles: []string{file}, acceptNew: true}
			if _, err := hk.algorithms("node1:22"); err != nil { // the fan-out reads the file
				t.Fatal(err)
			}
			if tc.written != nil {
				if err := os.WriteFile(file, []byte(seed+"\n"+knownhosts.Line([]string{"node1"}, tc.written)+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := hk.callback("node1:22")("node1:22", remote, key.PublicKey())
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want != nil && !strings.Contains(err.Error(), file+":2") {
				t.Errorf("the refusal does not name the other writer's line (%s:2): %v", file, err)
			}
			b, _ := os.ReadFile(file)
			if n := strings.Count(string(b), "\n"); n != tc.lines {
				t.Errorf("known_hosts has %d lines, want %d:\n%s", n, tc.lines, b)
			}
			// What the file now says is what this fan-out says, line
			// numbers included.
			hk.acceptNew = false
			err = hk.callback("node1:22")("node1:22", remote, other.PublicKey())
			var hke *HostKeyError
			if tc.want == nil {
				if !errors.As(err, &hke) || len(hke.Known) != 1 || hke.Known[0].Line != 2 {
					t.Errorf("another key afterwards: %v, want refused naming line 2", err)
				}
			}
		})
	}
}

// TestRecordConcurrentOnce: dials of one fan-out recording the same
// unknown host at once write it once.
func TestRecordConcurrentOnce(t *testing.T) {
	key := mustKey(t)
	file := filepath.Join(t.TempDir(), "known_hosts")
	set := newKnownHosts()
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.5"), Port: 22}
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hk := &hostKeys{userFiles: []string{file}, acceptNew: true, known: set}
			errs[i] = hk.callback("node1:22")("node1:22", remote, key.PublicKey())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(file)
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Errorf("recorded %d times, want once:\n%s", n, b)
	}
}

// TestKnownHostsIndexAgreesWithKnownhosts: for every lookup, the lines the
// index hands to knownhosts give the verdict knownhosts gives on the whole
// file, down to the file and line of each known key.
func TestKnownHostsIndexAgreesWithKnownhosts(t *testing.T) {
	k1, k2, k3 := mustKey(t), mustKey(t), mustKey(t)
	auth := func(k ssh.Signer) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.PublicKey()))) }
	content := strings.Join([]string{
		"# comment",
		"node1 " + auth(k1),
		"node1,node2 " + auth(k2),
		"[node1]:2222 " + auth(k1),
		"node4:2222 " + auth(k1), // knownhosts reads host:port without brackets too
		"*.example.com " + auth(k1),
		"!node3,node* " + auth(k3),
		knownhosts.HashHostname("hashed1") + " " + auth(k1),
		knownhosts.HashHostname("[hashed2]:2200") + " " + auth(k2),
		"|1|bad|hash " + auth(k1),
		"@revoked * " + auth(k3),
		"@cert-authority *.ca " + auth(k2),
		"node5 ssh-ed25519 !!!notbase64",
		"[bad " + auth(k1),
		"::1 " + auth(k1),
		"[::1]:2200 " + auth(k2),
		"NODE1 " + auth(k2),
		"  \tnode6 " + auth(k1) + "\r",
		"node7",
		"",
	}, "\n")
	file := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	whole, err := parseKnownHosts(file, []byte(content), nil)
	if err != nil {
		t.Fatal(err)
	}
	set := newKnownHosts()
	hosts := []string{"node1:22", "node1:2222", "node2:22", "node3:22", "node4:2222", "node4:22", "a.example.com:22",
		"example.com:22", "hashed1:22", "hashed2:2200", "hashed2:22", "[::1]:22", "[::1]:2200", "NODE1:22",
		"node6:22", "node7:22", "nodex:22", "x.ca:22", "node5:22", "bad:22"}
	for _, hp := range hosts {
		index, _, err := set.db([]string{file}, hp)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range []ssh.Signer{k1, k2, k3} {
			want := verdict(whole(hp, probeAddr(hp), k.PublicKey()))
			got := verdict(index(hp, probeAddr(hp), k.PublicKey()))
			if got != want {
				t.Errorf("%s, key %d: index says %s, knownhosts on the whole file %s", hp, i+1, got, want)
			}
		}
	}
}

// verdict describes a knownhosts answer: ok, revoked at a line, or the
// keys known (file:line type) for the host.
func verdict(err error) string {
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &re):
		return fmt.Sprintf("revoked %s:%d", re.Revoked.Filename, re.Revoked.Line)
	case errors.As(err, &ke):
		var s []string
		for _, k := range ke.Want {
			s = append(s, fmt.Sprintf("%s:%d %s", k.Filename, k.Line, ssh.FingerprintSHA256(k.Key)))
		}
		return "known [" + strings.Join(s, ", ") + "]"
	default:
		return "error " + err.Error()
	}
}

// TestHostIndexAgreesWithEveryBlock: the blocks the index lets a host's
// lookup skip are blocks that do not match it.
func TestHostIndexAgreesWithEveryBlock(t *testing.T) {
	home := t.TempDir()
	writeFile(t, filepath.Join(home, ".ssh", "inc"), "Host b\n  User inc-b\nHost *\n  Port 7\n", 0o600)
	conf := writeFile(t, filepath.Join(home, "config"), strings.Join([]string{
		"User top",
		"Host a b",
		"  User ab",
		"Host *",
		"  IdentityFile star",
		"Host !c *",
		"  User not-c",
		"Host c",
		"  User c",
		"  Include inc",
		"Host A",
		"  User upper-a",
		"Host d.e",
		"  User d.e",
		"Host b",
		"  IdentityFile b",
		"Match host c",
		"  IdentityFile match-c",
		"",
	}, "\n"), 0o600)
	c, err := loadSSHConfig(conf, home)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"a", "b", "c", "A", "d.e", "dxe", "zz", ""} {
		got := c.forHost(host)
		var want hostConfig
		for _, f := range c.files {
			want = collectEvery(f, host, want)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: index gives %v, every block %v", host, kvs(got), kvs(want))
		}
	}
}

// collectEvery is configFile.collect trying every block.
func collectEvery(f *configFile, host string, out hostConfig) hostConfig {
	for _, h := range f.cfg.Hosts {
		if !h.Matches(host) {
			continue
		}
		for _, node := range h.Nodes {
			kv, ok := node.(*ssh_config.KV)
			if !ok || kv.Value == "" {
				continue
			}
			if strings.EqualFold(kv.Key, includeKey) {
				var n int
				fmt.Sscan(kv.Value, &n)
				for _, sub := range f.includes[n] {
					out = collectEvery(sub, host, out)
				}
				continue
			}
			out = append(out, kv)
		}
	}
	return out
}

func kvs(hc hostConfig) []string {
	var s []string
	for _, kv := range hc {
		s = append(s, kv.Key+"="+kv.Value)
	}
	return s
}

// TestDialAllCollapsesPerNodeNotices: a notice naming its node is passed
// for the first collapseAbove nodes, then once more for all the others.
func TestDialAllCollapsesPerNodeNotices(t *testing.T) {
	home := isolate(t)
	conf := fmt.Sprintf("Host n*\n  HostName 127.0.0.1\n  Port %d\n  StrictHostKeyChecking no\n", refusedPort(t))
	var warnings []string
	cfg := Config{
		SSHConfigFile: writeFile(t, filepath.Join(home, "cfg"), conf, 0o600),
		KnownHosts:    os.DevNull,
		Warn:          func(msg string) { warnings = append(warnings, msg) },
	}
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	remotes, err := DialAll(context.Background(), names, cfg, 1)
	closeRemotes(remotes)
	if err == nil {
		t.Fatal("refused ports connected")
	}
	if len(warnings) != collapseAbove+1 {
		t.Fatalf("%d warnings, want %d:\n%s", len(warnings), collapseAbove+1, strings.Join(warnings, "\n"))
	}
	for i, w := range warnings[:collapseAbove] {
		if !strings.Contains(w, fmt.Sprintf("host n%d: StrictHostKeyChecking no ignored", i)) {
			t.Errorf("warning %d = %q", i, w)
		}
	}
	if last := warnings[collapseAbove]; !strings.HasPrefix(last, "12 more nodes alike (n[8-19]): ssh config: host n0: StrictHostKeyChecking no ignored") {
		t.Errorf("summary = %q", last)
	}
}
