package sshexec

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/wire"
	"github.com/hashicorp/go-multierror"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ---- Without a cluster --------------------------------------------------

func TestSplitUserHostPort(t *testing.T) {
	tests := []struct {
		in         string
		user, host string
		port       int
		wantErr    bool
	}{
		{in: "node1", host: "node1"},
		{in: "alice@node1", user: "alice", host: "node1"},
		{in: "node1:2222", host: "node1", port: 2222},
		{in: "alice@10.0.0.1:22", user: "alice", host: "10.0.0.1", port: 22},
		{in: "[fe80::1]:2200", host: "fe80::1", port: 2200},
		{in: "[fe80::1]", host: "fe80::1"},
		{in: "fe80::1", host: "fe80::1"},
		{in: "a@b@node1", user: "a@b", host: "node1"},
		{in: "node1:0", wantErr: true},
		{in: "node1:ssh", wantErr: true},
		{in: "alice@", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			u, h, p, err := splitUserHostPort(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (u != tc.user || h != tc.host || p != tc.port) {
				t.Errorf("got (%q, %q, %d), want (%q, %q, %d)", u, h, p, tc.user, tc.host, tc.port)
			}
		})
	}
}

const testSSHConfig = `
Host jumpy
  HostName 192.0.2.7
  ProxyJump bastion,alice@hop2:2200

Host gpu*  !gpu9
  HostName %h.cluster.example
  User trainer
  Port 2201
  IdentityFile ~/.ssh/gpu_key
  IdentityFile /keys/%r-%n
  IdentitiesOnly yes
  UserKnownHostsFile ~/kh1 /etc/kh2
  ConnectTimeout 4
  StrictHostKeyChecking accept-new

Host lax
  StrictHostKeyChecking no

Host proxied
  ProxyCommand nc %h %p

Host badport
  Port http

Host *
  User everyone
  HashKnownHosts yes
`

func TestResolveHost(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	cfgFile := filepath.Join(home, "cfg")
	if err := os.WriteFile(cfgFile, []byte(testSSHConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	conf, err := loadSSHConfig(cfgFile, home)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		target  string
		cfg     Config
		check   func(t *testing.T, s hostSettings)
		wantErr string
	}{
		{name: "pattern and tokens", target: "gpu1", check: func(t *testing.T, s hostSettings) {
			want := hostSettings{
				Alias: "gpu1", HostName: "gpu1.cluster.example", User: "trainer", Port: 2201,
				IdentityFiles:  []string{home + "/.ssh/gpu_key", "/keys/trainer-gpu1"},
				IdentitiesOnly: true, KnownHosts: []string{home + "/kh1", "/etc/kh2"},
				AcceptNew: true, ConnectTimeout: 4 * time.Second, HashKnownHosts: true,
			}
			if s.Alias != want.Alias || s.HostName != want.HostName || s.User != want.User || s.Port != want.Port ||
				strings.Join(s.IdentityFiles, " ") != strings.Join(want.IdentityFiles, " ") ||
				!s.IdentitiesOnly || strings.Join(s.KnownHosts, " ") != strings.Join(want.KnownHosts, " ") ||
				!s.AcceptNew || s.ConnectTimeout != want.ConnectTimeout || !s.HashKnownHosts {
				t.Errorf("got %+v\nwant %+v", s, want)
			}
		}},
		{name: "negated pattern falls through to Host *", target: "gpu9", check: func(t *testing.T, s hostSettings) {
			if s.HostName != "gpu9" || s.User != "everyone" || s.Port != 22 || s.AcceptNew ||
				s.ConnectTimeout != DefaultConnectTimeout || len(s.IdentityFiles) != 0 {
				t.Errorf("got %+v", s)
			}
			if s.KnownHosts[0] != home+"/.ssh/known_hosts" {
				t.Errorf("known hosts default = %v", s.KnownHosts)
			}
		}},
		{name: "flags win over ssh_config", target: "gpu1",
			cfg: Config{User: "root", Port: 22, Identity: "~/id_flag", KnownHosts: "/tmp/kh", ConnectTimeout: time.Second},
			check: func(t *testing.T, s hostSettings) {
				if s.User != "root" || s.Port != 22 || s.IdentityFiles[0] != home+"/id_flag" ||
					len(s.KnownHosts) != 1 || s.KnownHosts[0] != "/tmp/kh" || s.ConnectTimeout != time.Second {
					t.Errorf("got %+v", s)
				}
			}},
		{name: "user@host:port beats flags", target: "bob@gpu1:23", cfg: Config{User: "root", Port: 22},
			check: func(t *testing.T, s hostSettings) {
				if s.User != "bob" || s.Port != 23 || s.IdentityFiles[1] != "/keys/bob-gpu1" {
					t.Errorf("got %+v", s)
				}
			}},
		{name: "proxy jump", target: "jumpy", check: func(t *testing.T, s hostSettings) {
			if s.ProxyJump != "bastion,alice@hop2:2200" || s.HostName != "192.0.2.7" {
				t.Errorf("got %+v", s)
			}
		}},
		{name: "StrictHostKeyChecking no is ignored with a warning", target: "lax", check: func(t *testing.T, s hostSettings) {
			if s.AcceptNew || len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "always verifies host keys") {
				t.Errorf("AcceptNew=%v warnings=%q", s.AcceptNew, s.Warnings)
			}
		}},
		{name: "ProxyCommand refused", target: "proxied", wantErr: "ProxyCommand is not supported"},
		{name: "bad port", target: "badport", wantErr: `bad Port "http"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := resolveHost(tc.target, tc.cfg, conf)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func TestSSHConfigMatch(t *testing.T) {
	home := t.TempDir()
	cfgFile := filepath.Join(home, "cfg")
	conf := "Match host gpu*\n  User matched\n" +
		"Match final all\n  User final\n" +
		"Match exec \"true\"\n  User exec\n" +
		"Match host a user b\n  User mixed\n" +
		"Host *\n  User fallback\n"
	os.WriteFile(cfgFile, []byte(conf), 0o600)
	c, err := loadSSHConfig(cfgFile, home)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.warnings) != 3 {
		t.Errorf("warnings = %q, want 3 (final, exec, mixed criteria)", c.warnings)
	}
	for host, want := range map[string]string{"gpu1": "matched", "cpu1": "fallback", "a": "fallback"} {
		s, err := resolveHost(host, Config{}, c)
		if err != nil {
			t.Fatal(err)
		}
		if s.User != want {
			t.Errorf("%s: User = %q, want %q", host, s.User, want)
		}
		if len(s.Warnings) != 3 {
			t.Errorf("%s: warnings not passed on: %q", host, s.Warnings)
		}
	}
}

func TestLoadSSHConfigMissing(t *testing.T) {
	if _, err := loadSSHConfig(filepath.Join(t.TempDir(), "nope"), t.TempDir()); err == nil {
		t.Error("an explicit ssh config file that does not exist must be an error")
	}
	conf, err := loadSSHConfig("", t.TempDir()) // no ~/.ssh/config: fine
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resolveHost("somewhere", Config{}, conf); err != nil {
		t.Fatal(err)
	}
}

func TestIsLocalHost(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"localhost", "localhost", true},
		{"LOCALHOST", "LOCALHOST", true},
		{"loopback v4", "127.0.0.1", true},
		{"loopback v4 other", "127.1.2.3", true},
		{"loopback v6", "::1", true},
		{"bracketed v6", "[::1]", true},
		{"own hostname", host, true},
		{"own hostname with domain", host + ".example.internal", true},
		{"empty", "", false},
		{"other name", "definitely-not-" + host, false},
		{"documentation address", "198.51.100.77", false},
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				tests = append(tests, struct {
					name string
					in   string
					want bool
				}{"interface " + n.IP.String(), n.IP.String(), true})
				break
			}
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsLocalHost(tc.in); got != tc.want {
				t.Errorf("IsLocalHost(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func newTestKey(t testing.TB) (ssh.Signer, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return signer, pem.EncodeToMemory(block)
}

func TestHostKeys(t *testing.T) {
	known, _ := newTestKey(t)
	other, _ := newTestKey(t)
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.5"), Port: 2222}
	tests := []struct {
		name      string
		file      string // known_hosts content
		acceptNew bool
		hash      bool
		host      string
		key       ssh.PublicKey
		wantErr   error
		wantLine  string // appended line (host part) when accept-new records
	}{
		{name: "known", file: knownhosts.Line([]string{"node1"}, known.PublicKey()), host: "node1:22", key: known.PublicKey()},
		{name: "known hashed", file: knownhosts.HashHostname("node1") + " " + string(ssh.MarshalAuthorizedKey(known.PublicKey())),
			host: "node1:22", key: known.PublicKey()},
		{name: "known non-standard port", file: knownhosts.Line([]string{"node1:2222"}, known.PublicKey()), host: "node1:2222", key: known.PublicKey()},
		{name: "unknown", file: "", host: "node1:22", key: known.PublicKey(), wantErr: ErrUnknownHost},
		{name: "port matters", file: knownhosts.Line([]string{"node1"}, known.PublicKey()), host: "node1:2222", key: known.PublicKey(), wantErr: ErrUnknownHost},
		{name: "changed", file: "# comment\n" + knownhosts.Line([]string{"node1"}, known.PublicKey()), host: "node1:22", key: other.PublicKey(), wantErr: ErrHostKeyChanged},
		{name: "changed even with accept-new", file: knownhosts.Line([]string{"node1"}, known.PublicKey()), acceptNew: true, host: "node1:22", key: other.PublicKey(), wantErr: ErrHostKeyChanged},
		{name: "revoked", file: "@revoked * " + string(ssh.MarshalAuthorizedKey(known.PublicKey())), host: "node1:22", key: known.PublicKey(), wantErr: ErrHostKeyChanged},
		{name: "accept-new records port 22 bare", acceptNew: true, host: "node1:22", key: known.PublicKey(), wantLine: "node1 "},
		{name: "accept-new records other port bracketed", acceptNew: true, host: "10.0.0.1:2222", key: known.PublicKey(), wantLine: "[10.0.0.1]:2222 "},
		{name: "accept-new records hashed", acceptNew: true, hash: true, host: "node1:22", key: known.PublicKey(), wantLine: "|1|"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "sub", "known_hosts")
			if tc.file != "" {
				os.MkdirAll(filepath.Dir(file), 0o700)
				if err := os.WriteFile(file, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			hk := &hostKeys{userFiles: []string{file}, acceptNew: tc.acceptNew, hash: tc.hash}
			err := hk.callback(tc.host)(tc.host, remote, tc.key)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				msg := err.Error()
				if !strings.Contains(msg, ssh.FingerprintSHA256(tc.key)) {
					t.Errorf("error does not name the offered key's fingerprint: %s", msg)
				}
				if errors.Is(err, ErrUnknownHost) && !(strings.Contains(msg, "ssh-keyscan") && strings.Contains(msg, "--ssh-accept-new")) {
					t.Errorf("unknown-host error does not give the fixes: %s", msg)
				}
				if errors.Is(err, ErrHostKeyChanged) && !strings.Contains(msg, file+":") {
					t.Errorf("changed-key error does not say which file and line: %s", msg)
				}
			}
			if tc.wantLine != "" {
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(string(b), tc.wantLine) || !strings.HasSuffix(string(b), "\n") {
					t.Errorf("recorded %q, want a line starting %q", b, tc.wantLine)
				}
				// What was recorded is accepted afterwards, without accept-new.
				hk.acceptNew = false
				if err := hk.callback(tc.host)(tc.host, remote, tc.key); err != nil {
					t.Errorf("recorded key not accepted: %v", err)
				}
			}
		})
	}
}

func TestHostKeyAlgorithms(t *testing.T) {
	ed, _ := newTestKey(t)
	file := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(file, []byte(knownhosts.Line([]string{"node1"}, ed.PublicKey())+"\n"), 0o600)
	hk := &hostKeys{userFiles: []string{file}}
	got, err := hk.algorithms("node1:22")
	if err != nil || strings.Join(got, ",") != ssh.KeyAlgoED25519 {
		t.Errorf("known host: algorithms = %v, %v; want [%s]", got, err, ssh.KeyAlgoED25519)
	}
	got, err = hk.algorithms("node2:22")
	if err != nil || got != nil {
		t.Errorf("unknown host: algorithms = %v, %v; want nil (library default)", got, err)
	}
}

func TestForEach(t *testing.T) {
	hosts := []string{"a", "b", "c", "d", "e", "f", "g"}
	var running, peak atomic.Int32
	err := ForEach(context.Background(), hosts, 3, func(ctx context.Context, h string) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		if h == "b" || h == "f" {
			return fmt.Errorf("boom %s", h)
		}
		return nil
	})
	if p := peak.Load(); p > 3 || p < 2 {
		t.Errorf("peak concurrency %d, want at most 3 (and some overlap)", p)
	}
	var merr *multierror.Error
	if !errors.As(err, &merr) || len(merr.Errors) != 2 {
		t.Fatalf("err = %v, want two host errors", err)
	}
	for i, want := range []string{"b", "f"} {
		var he *HostError
		if !errors.As(merr.Errors[i], &he) || he.Host != want {
			t.Errorf("error %d = %v, want host %s", i, merr.Errors[i], want)
		}
	}
	if ForEach(context.Background(), hosts, 0, func(context.Context, string) error { return nil }) != nil {
		t.Error("no failures must give a nil error")
	}
}

// ---- Against the netns test cluster ---------------------------------------

// cluster is a running examples/testcluster/netns-cluster.sh.
type cluster struct {
	dir, sshConfig, knownHosts string
	nodes, addrs               []string
}

func testCluster(tb testing.TB) *cluster {
	tb.Helper()
	dir := os.Getenv("GORUN_TESTCLUSTER")
	if dir == "" {
		if os.Getenv("GORUN_E2E") == "1" {
			tb.Fatal("GORUN_E2E=1 but GORUN_TESTCLUSTER is not set: start examples/testcluster/netns-cluster.sh up 3 and point GORUN_TESTCLUSTER at its STATE dir")
		}
		tb.Skip("no test cluster: run `STATE=/tmp/gorun-testcluster examples/testcluster/netns-cluster.sh up 3` (root) and set GORUN_TESTCLUSTER=/tmp/gorun-testcluster")
	}
	c := &cluster{dir: dir, sshConfig: filepath.Join(dir, "ssh_config"), knownHosts: filepath.Join(dir, "known_hosts")}
	b, err := os.ReadFile(filepath.Join(dir, "hosts"))
	if err != nil {
		tb.Fatalf("test cluster at %s: %v", dir, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			tb.Fatalf("test cluster hosts file: bad line %q", line)
		}
		c.addrs, c.nodes = append(c.addrs, f[0]), append(c.nodes, f[1])
	}
	if len(c.nodes) < 2 {
		tb.Fatalf("test cluster has %d nodes, these tests need at least 2", len(c.nodes))
	}
	tb.Setenv("SSH_AUTH_SOCK", "") // only the cluster's key
	return c
}

func (c *cluster) config() Config { return Config{SSHConfigFile: c.sshConfig} }

// hostKey is node i's public host key.
func (c *cluster) hostKey(t testing.TB, i int) ssh.PublicKey {
	b, err := os.ReadFile(filepath.Join(c.dir, c.nodes[i], "ssh_host_ed25519_key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func dialT(t testing.TB, host string, cfg Config) *Remote {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := Dial(ctx, host, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestClusterOutputEveryNode(t *testing.T) {
	c := testCluster(t)
	for _, node := range c.nodes {
		t.Run(node, func(t *testing.T) {
			var warnings []string
			cfg := c.config()
			cfg.Warn = func(msg string) { warnings = append(warnings, msg) }
			r := dialT(t, node, cfg)
			out, err := r.Output(context.Background(), []string{"hostname"})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(out)); got != node {
				t.Errorf("hostname = %q, want %q", got, node)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings: %q", warnings)
			}
			r.Close()
			if _, err := r.Output(context.Background(), []string{"true"}); !errors.Is(err, ErrClosed) {
				t.Errorf("Output after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestClusterFlagsOnly reaches a node by address with the default ssh_config
// files (~/.ssh/config, /etc/ssh/ssh_config) and flags for the rest.
func TestClusterFlagsOnly(t *testing.T) {
	c := testCluster(t)
	t.Setenv("HOME", t.TempDir()) // no ~/.ssh/config, no default keys
	r := dialT(t, c.addrs[2], Config{User: "root", Port: 22, Identity: filepath.Join(c.dir, "id_ed25519"), KnownHosts: c.knownHosts,
		Warn: func(msg string) { t.Logf("warning: %s", msg) }})
	out, err := r.Output(context.Background(), []string{"hostname"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != c.nodes[2] {
		t.Errorf("hostname = %q, want %q", got, c.nodes[2])
	}
}

func TestClusterOutputQuotingAndErrors(t *testing.T) {
	c := testCluster(t)
	r := dialT(t, c.nodes[0], c.config())
	ctx := context.Background()
	t.Run("hostile argv arrives intact", func(t *testing.T) {
		// internal/shell's tests cover the quoting; this is the SSH path.
		words := []string{"", "a b", "it's", `"`, `\`, "$(id)", "`id`", "$HOME", "A=b", "--lr=3e-4",
			"a;b", "*", "~", "#c", "!!", "new\nline", "héllo", "\xff"}
		out, err := r.Output(ctx, append([]string{"printf", `%s\0`}, words...))
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if strings.Join(got, "|") != strings.Join(words, "|") {
			t.Errorf("node got %q\nwant %q", got, words)
		}
	})
	t.Run("exit code and stderr tail in the error", func(t *testing.T) {
		_, err := r.Output(ctx, []string{"sh", "-c", "echo partial; echo 'disk on fire' >&2; exit 3"})
		if err == nil || !strings.Contains(err.Error(), "exit code 3") || !strings.Contains(err.Error(), "disk on fire") ||
			!strings.Contains(err.Error(), c.nodes[0]) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("ctx cancels a running command", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := r.Output(ctx, []string{"sleep", "30"})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Errorf("err = %v after %v", err, time.Since(start))
		}
	})
}

func TestClusterUnknownHostRefused(t *testing.T) {
	c := testCluster(t)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, nil, 0o600); err != nil { // a missing one is refused before connecting
		t.Fatal(err)
	}
	cfg := c.config()
	cfg.KnownHosts = kh
	_, err := Dial(context.Background(), c.nodes[1], cfg)
	if !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("err = %v, want ErrUnknownHost", err)
	}
	t.Log(err)
	fp := ssh.FingerprintSHA256(c.hostKey(t, 1))
	for _, want := range []string{fp, c.addrs[1], "ssh-keyscan", "--ssh-accept-new"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if b, _ := os.ReadFile(kh); len(b) != 0 {
		t.Errorf("a refused host key must not be written: %q", b)
	}
}

func TestClusterAcceptNew(t *testing.T) {
	c := testCluster(t)
	kh := filepath.Join(t.TempDir(), "ssh", "known_hosts")
	cfg := c.config()
	cfg.KnownHosts, cfg.AcceptNew = kh, true
	r := dialT(t, c.nodes[1], cfg)
	if _, err := r.Output(context.Background(), []string{"true"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(kh)
	if err != nil {
		t.Fatal(err)
	}
	want := knownhosts.Line([]string{c.addrs[1]}, c.hostKey(t, 1)) + "\n"
	if string(b) != want {
		t.Errorf("known_hosts = %q, want %q (as OpenSSH writes it)", b, want)
	}
	cfg.AcceptNew = false
	dialT(t, c.nodes[1], cfg) // now known
	// And OpenSSH itself agrees with the line written.
	cmd := exec.Command("ssh", "-F", c.sshConfig, "-o", "UserKnownHostsFile="+kh, "-o", "StrictHostKeyChecking=yes", c.nodes[1], "true")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("OpenSSH rejects the recorded key: %v: %s", err, out)
	}
}

func TestClusterChangedKeyRefused(t *testing.T) {
	c := testCluster(t)
	wrong, _ := newTestKey(t)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	content := "# first line\n" + knownhosts.Line([]string{c.nodes[1], c.addrs[1]}, wrong.PublicKey()) + "\n"
	if err := os.WriteFile(kh, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, acceptNew := range []bool{false, true} {
		t.Run(fmt.Sprintf("acceptNew=%v", acceptNew), func(t *testing.T) {
			cfg := c.config()
			cfg.KnownHosts, cfg.AcceptNew = kh, acceptNew
			_, err := Dial(context.Background(), c.nodes[1], cfg)
			if !errors.Is(err, ErrHostKeyChanged) {
				t.Fatalf("err = %v, want ErrHostKeyChanged", err)
			}
			t.Log(err)
			for _, want := range []string{kh + ":2", ssh.FingerprintSHA256(c.hostKey(t, 1)), ssh.FingerprintSHA256(wrong.PublicKey())} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
			if b, _ := os.ReadFile(kh); string(b) != content {
				t.Errorf("known_hosts was modified: %q", b)
			}
		})
	}
}

func TestClusterUnreachable(t *testing.T) {
	c := testCluster(t)
	cfg := c.config()
	cfg.KnownHosts = c.knownHosts
	cfg.ConnectTimeout = 2 * time.Second
	start := time.Now()
	_, err := Dial(context.Background(), "10.77.0.250", cfg)
	took := time.Since(start)
	if err == nil {
		t.Fatal("dial to an address nobody has succeeded")
	}
	if took > 5*time.Second {
		t.Errorf("took %v with a 2 s ConnectTimeout", took)
	}
	if !strings.Contains(err.Error(), "10.77.0.250:22") {
		t.Errorf("error does not name the address: %v", err)
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
}

func TestClusterLoginRefused(t *testing.T) {
	c := testCluster(t)
	dir := t.TempDir()
	_, pemKey := newTestKey(t)
	keyFile := filepath.Join(dir, "wrong_key")
	os.WriteFile(keyFile, pemKey, 0o600)
	conf := fmt.Sprintf("Host %s\n  HostName %s\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n",
		c.nodes[1], c.addrs[1], keyFile, c.knownHosts)
	confFile := filepath.Join(dir, "ssh_config")
	os.WriteFile(confFile, []byte(conf), 0o600)
	_, err := Dial(context.Background(), c.nodes[1], Config{SSHConfigFile: confFile})
	if err == nil {
		t.Fatal("login with a key the node does not know succeeded")
	}
	t.Log(err)
	for _, want := range []string{"refused", "root@" + c.addrs[1], keyFile, "--ssh-identity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	t.Run("missing --ssh-identity", func(t *testing.T) {
		_, err := Dial(context.Background(), c.nodes[1], Config{SSHConfigFile: confFile, Identity: filepath.Join(dir, "nope")})
		if err == nil || !strings.Contains(err.Error(), "--ssh-identity") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("--ssh-identity with the right key wins", func(t *testing.T) {
		r := dialT(t, c.nodes[1], Config{SSHConfigFile: confFile, Identity: filepath.Join(c.dir, "id_ed25519")})
		if _, err := r.Output(context.Background(), []string{"true"}); err != nil {
			t.Error(err)
		}
	})
}

// sshClientOf returns "client-ip client-port" of the connection a command ran over.
func sshClientOf(t *testing.T, r *Remote) string {
	out, err := r.Output(context.Background(), []string{"sh", "-c", "echo $SSH_CONNECTION"})
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if len(f) != 4 {
		t.Fatalf("SSH_CONNECTION = %q", out)
	}
	return f[0] + " " + f[1]
}

func TestClusterProxyJump(t *testing.T) {
	c := testCluster(t)
	conf, err := os.ReadFile(c.sshConfig)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, jump, from string
	}{
		{"one hop", c.nodes[0], c.addrs[0]},
	}
	if len(c.nodes) >= 3 {
		tests = append(tests, struct{ name, jump, from string }{"two hops", c.nodes[0] + "," + c.nodes[2], c.addrs[2]})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			alias := c.nodes[1] + "-via" // still matches "Host node*"
			extra := fmt.Sprintf("Host %s\n  HostName %s\n  ProxyJump %s\n", alias, c.addrs[1], tc.jump)
			confFile := filepath.Join(t.TempDir(), "ssh_config")
			os.WriteFile(confFile, append([]byte(extra), conf...), 0o600)

			r := dialT(t, alias, Config{SSHConfigFile: confFile})
			out, err := r.Output(context.Background(), []string{"hostname"})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(out)); got != c.nodes[1] {
				t.Errorf("hostname = %q, want %q", got, c.nodes[1])
			}
			if from := sshClientOf(t, r); !strings.HasPrefix(from, tc.from+" ") {
				t.Errorf("connection comes from %s, want the last jump host %s", from, tc.from)
			}
			r.Close()
			for j := r.jump; j != nil; j = j.jump {
				if !isClosed(j.dead) {
					t.Errorf("closing the Remote left jump connection %s open", j.Node())
				}
			}
		})
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestClusterOneConnection(t *testing.T) {
	c := testCluster(t)
	r := dialT(t, c.nodes[0], c.config())
	var wg sync.WaitGroup
	froms := make([]string, 8)
	for i := range froms {
		wg.Add(1)
		go func() { defer wg.Done(); froms[i] = sshClientOf(t, r) }()
	}
	wg.Wait()
	for _, f := range froms {
		if f != froms[0] {
			t.Fatalf("sessions came over different connections: %q", froms)
		}
	}
	// A second Remote is a second connection: the check above can fail.
	if other := sshClientOf(t, dialT(t, c.nodes[0], c.config())); other == froms[0] {
		t.Errorf("two Remotes share client port %s", other)
	}
}

// agentWrapper writes a script that runs this test binary as the node agent
// (the cluster shares this machine's filesystem).
func agentWrapper(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "gorun-agent")
	script := "#!/bin/sh\nexec env " + testAgentEnv + "=1 " + shell.Quote(exe) + " \"$@\"\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// lockedBuffer is a bytes.Buffer safe for the output copier and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestClusterStartJob(t *testing.T) {
	c := testCluster(t)
	cfg := c.config()
	cfg.RemoteGorun = agentWrapper(t)
	r := dialT(t, c.nodes[1], cfg)
	ctx := context.Background()

	t.Run("exit code, output and env", func(t *testing.T) {
		var out, errb lockedBuffer
		p, err := r.Start(ctx, wire.Job{
			Argv: []string{"sh", "-c", `hostname; echo "$GREETING"; echo to-stderr >&2; exit 7`},
			Env:  map[string]string{"GREETING": "it's $(not) expanded"},
		}, &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		code, err := p.Wait()
		if code != 7 || err != nil {
			t.Errorf("Wait = %d, %v; want 7, nil", code, err)
		}
		if want := c.nodes[1] + "\nit's $(not) expanded\n"; out.String() != want {
			t.Errorf("stdout = %q, want %q", out.String(), want)
		}
		if !strings.Contains(errb.String(), "to-stderr") {
			t.Errorf("stderr = %q", errb.String())
		}
	})
	t.Run("stop", func(t *testing.T) {
		p, err := r.Start(ctx, wire.Job{Argv: []string{"sleep", "60"}}, &lockedBuffer{}, &lockedBuffer{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p.Stop(false)
		code, err := p.Wait()
		if err != nil || code == 0 || time.Since(start) > 10*time.Second {
			t.Errorf("after Stop: Wait = %d, %v after %v", code, err, time.Since(start))
		}
	})
	t.Run("no agent configured", func(t *testing.T) {
		r := dialT(t, c.nodes[1], c.config())
		if _, err := r.Start(ctx, wire.Job{Argv: []string{"true"}}, &lockedBuffer{}, &lockedBuffer{}); err == nil ||
			!strings.Contains(err.Error(), "--remote-gorun") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestClusterKeepaliveNoticesDeadLink takes node1's link down and checks
// that both a running job and the connection notice within 15 s.
func TestClusterKeepaliveNoticesDeadLink(t *testing.T) {
	c := testCluster(t)
	veth := "gorun-v1"
	if err := exec.Command("ip", "link", "show", veth).Run(); err != nil {
		t.Skipf("no %s link to take down (cluster PREFIX not gorun?): %v", veth, err)
	}
	cfg := c.config()
	cfg.RemoteGorun = agentWrapper(t)
	r := dialT(t, c.nodes[1], cfg)
	p, err := r.Start(context.Background(), wire.Job{Argv: []string{"sleep", "120"}}, &lockedBuffer{}, &lockedBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	outErr := make(chan error, 1)
	go func() {
		_, err := r.Output(context.Background(), []string{"sleep", "120"})
		outErr <- err
	}()
	time.Sleep(500 * time.Millisecond) // let both sessions start

	if out, err := exec.Command("ip", "link", "set", veth, "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s down: %v: %s", veth, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "link", "set", veth, "up").CombinedOutput(); err != nil {
			t.Errorf("restore %s: %v: %s", veth, err, out)
		}
	})
	start := time.Now()
	waited := make(chan struct{})
	var code int
	go func() { code, err = p.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		t.Fatal("job's Wait did not return within 15 s of the link going down")
	}
	t.Logf("Wait returned after %v: %d, %v", time.Since(start).Round(time.Millisecond), code, err)
	if code != -1 || err == nil || !strings.Contains(err.Error(), "keepalives") {
		t.Errorf("Wait = %d, %v; want -1 and a lost-connection error naming the keepalives", code, err)
	}
	select {
	case err := <-outErr:
		if err == nil {
			t.Error("Output over a dead link returned no error")
		}
	case <-time.After(2 * time.Second):
		t.Error("Output did not return after the connection was declared dead")
	}
	if !isClosed(r.dead) {
		t.Error("Done not closed")
	}
	if _, err := r.Output(context.Background(), []string{"true"}); err == nil {
		t.Error("Output after the link died succeeded")
	}
}

func TestClusterEnsureAgent(t *testing.T) {
	c := testCluster(t)
	// Random content: a fresh content address, so the first call uploads.
	binPath := filepath.Join(t.TempDir(), "gorun")
	payload := make([]byte, 3<<20)
	rand.Read(payload)
	os.WriteFile(binPath, payload, 0o755)
	ctx := context.Background()
	bin, err := HashBinary(binPath)
	if err != nil {
		t.Fatal(err)
	}

	r := dialT(t, c.nodes[0], c.config())
	path, err := r.EnsureAgent(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) }) // the nodes share this filesystem
	if !strings.Contains(path, "/.cache/gorun/gorun-") || len(filepath.Base(path)) != len("gorun-")+16 {
		t.Errorf("path %q is not content-addressed under ~/.cache/gorun", path)
	}
	got, err := r.Output(ctx, []string{"cat", path})
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("node's copy differs (%d bytes, err %v)", len(got), err)
	}
	inode := func() string {
		out, err := r.Output(ctx, []string{"stat", "-c", "%i %a", path})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	before := inode()
	if !strings.HasSuffix(before, " 755") {
		t.Errorf("mode: %s", before)
	}
	// Cached in the Remote, and a fresh connection finds it in place.
	if p2, err := r.EnsureAgent(ctx, bin); err != nil || p2 != path {
		t.Errorf("second call: %q, %v", p2, err)
	}
	r2 := dialT(t, c.nodes[1], c.config())
	if p3, err := r2.EnsureAgent(ctx, bin); err != nil || p3 != path {
		t.Errorf("other node: %q, %v", p3, err)
	}
	if after := inode(); after != before {
		t.Errorf("binary rewritten (%s -> %s): the upload is not idempotent", before, after)
	}
	if ls, _ := r.Output(ctx, []string{"sh", "-c", "ls " + shell.Quote(filepath.Dir(path)) + " | grep -c tmp || true"}); strings.TrimSpace(string(ls)) != "0" {
		t.Errorf("temporary files left behind: %s", ls)
	}

	t.Run("RemoteGorun skips the upload", func(t *testing.T) {
		cfg := c.config()
		cfg.RemoteGorun = "/opt/gorun/bin/gorun"
		r := dialT(t, c.nodes[0], cfg)
		if p, err := r.EnsureAgent(ctx, Binary{Path: filepath.Join(t.TempDir(), "missing")}); err != nil || p != cfg.RemoteGorun {
			t.Errorf("got %q, %v", p, err)
		}
	})
	t.Run("missing local binary", func(t *testing.T) {
		if _, err := HashBinary(filepath.Join(t.TempDir(), "missing")); err == nil {
			t.Error("no error hashing a missing binary")
		}
		missing := Binary{Path: filepath.Join(t.TempDir(), "missing"), Name: "gorun-00000000deadbeef", Size: 1}
		if _, err := dialT(t, c.nodes[0], c.config()).EnsureAgent(ctx, missing); err == nil {
			t.Error("no error uploading a missing binary")
		}
	})
}

func TestClusterDialAll(t *testing.T) {
	c := testCluster(t)
	cfg := c.config()
	cfg.ConnectTimeout = 2 * time.Second
	hosts := append(append([]string{}, c.nodes...), c.nodes[0], "10.77.0.250")
	remotes, err := DialAll(context.Background(), hosts, cfg, 2)
	defer closeRemotes(remotes)
	var merr *multierror.Error
	if !errors.As(err, &merr) || len(merr.Errors) != 1 {
		t.Fatalf("err = %v, want exactly one failing host", err)
	}
	var he *HostError
	if !errors.As(merr.Errors[0], &he) || he.Host != "10.77.0.250" {
		t.Errorf("failing host = %v", merr.Errors[0])
	}
	if len(remotes) != len(c.nodes) {
		t.Fatalf("%d connections, want %d", len(remotes), len(c.nodes))
	}
	err = ForEach(context.Background(), c.nodes, 2, func(ctx context.Context, h string) error {
		out, err := remotes[h].Output(ctx, []string{"hostname"})
		if err == nil && strings.TrimSpace(string(out)) != h {
			err = fmt.Errorf("hostname %q", out)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}

func closeRemotes(remotes map[string]*Remote) {
	for _, r := range remotes {
		r.Close()
	}
}

// BenchmarkFanout: connect to N nodes and run `true` on each, gorun's
// fan-out (DialAll + Output on one connection per node) and, in the same
// run, `pdsh -R ssh` on the same nodes with the same ssh_config, when pdsh
// is installed. Compare ns/op of gorun/nodes=N with pdsh/nodes=N.
func BenchmarkFanout(b *testing.B) {
	c := testCluster(b)
	pdsh, pdshErr := exec.LookPath("pdsh")
	for _, n := range []int{1, 4, 16, 32} {
		if n > len(c.nodes) {
			break
		}
		hosts := c.nodes[:n]
		b.Run(fmt.Sprintf("gorun/nodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				remotes, err := DialAll(context.Background(), hosts, c.config(), 0)
				if err == nil {
					err = ForEach(context.Background(), hosts, 0, func(ctx context.Context, h string) error {
						_, err := remotes[h].Output(ctx, []string{"true"})
						return err
					})
				}
				closeRemotes(remotes)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("pdsh/nodes=%d", n), func(b *testing.B) {
			if pdshErr != nil {
				b.Skip("pdsh is not installed")
			}
			for b.Loop() {
				cmd := exec.Command(pdsh, "-R", "ssh", "-f", "64", "-w", strings.Join(hosts, ","), "true")
				cmd.Env = append(os.Environ(), "PDSH_SSH_ARGS_APPEND=-F "+c.sshConfig)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("pdsh: %v: %s", err, out)
				}
			}
		})
	}
}

// FuzzResolveHost: no ssh_config content makes resolving a host panic.
func FuzzResolveHost(f *testing.F) {
	f.Add(testSSHConfig, "gpu1")
	f.Add("Match host x user y\nHost *\n  Port 22\n", "x")
	f.Add("Host a\n  HostName %h%%%\n  IdentityFile ~/%d/%r\n", "a")
	f.Fuzz(func(t *testing.T, conf, host string) {
		if strings.Contains(strings.ToLower(conf), "include") {
			// Include reads files of this machine named by the input
			// (through inputfile, so never a device or a FIFO, but still);
			// keep to the config text itself. TestSSHConfigInclude covers it.
			t.Skip("Include reads arbitrary local files")
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "cfg")
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := loadSSHConfig(file, dir)
		if err != nil {
			return
		}
		s, err := resolveHost(host, Config{}, c)
		if err != nil {
			if err.Error() == "" {
				t.Errorf("resolveHost(%q): an empty error", host)
			}
			return
		}
		// What a dial needs: somewhere to connect, a port ssh could use, a
		// user, and settings that do not depend on the order of calls.
		if s.HostName == "" || s.User == "" {
			t.Errorf("resolveHost(%q) = %+v: no HostName or User", host, s)
		}
		if s.Port < 1 || s.Port > 65535 {
			t.Errorf("resolveHost(%q): Port %d", host, s.Port)
		}
		if s.Alias == "" || strings.ContainsAny(s.Alias, "@") {
			t.Errorf("resolveHost(%q): Alias %q", host, s.Alias)
		}
		again, err := resolveHost(host, Config{}, c)
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Errorf("resolveHost(%q) is not deterministic: %+v then %+v, %v", host, s, again, err)
		}
	})
}
