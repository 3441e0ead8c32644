package sshexec

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testSSHServer is an in-process SSH server on 127.0.0.1 that lets anyone
// in (no client auth) and refuses every channel: enough for a dial to
// complete, or to fail on the host key. It returns its port.
func testSSHServer(t *testing.T, hostKey ssh.Signer) int {
	t.Helper()
	conf := &ssh.ServerConfig{NoClientAuth: true}
	conf.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sc, chans, reqs, err := ssh.NewServerConn(c, conf)
				if err != nil {
					return
				}
				defer sc.Close()
				go ssh.DiscardRequests(reqs)
				for ch := range chans {
					ch.Reject(ssh.Prohibited, "test server")
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// silentServer accepts TCP connections and never writes a byte, like a
// hung sshd. It counts the connections it accepted.
func silentServer(t *testing.T) (port int, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int32)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, accepted
}

// writeFile writes a test file with the given mode (whatever the umask).
func writeFile(t testing.TB, path, content string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// isolate points HOME at an empty directory and drops SSH_AUTH_SOCK, so
// no file or agent of the machine running the tests takes part.
func isolate(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	return home
}

func TestDialHostKeyErrorThroughEveryWrap(t *testing.T) {
	home := isolate(t)
	serverKey, _ := newTestKey(t)
	otherKey, _ := newTestKey(t)
	port := testSSHServer(t, serverKey)
	hostport := fmt.Sprintf("[127.0.0.1]:%d", port)

	tests := []struct {
		name   string
		known  string // known_hosts content
		target string
		kind   error
		jump   bool
	}{
		{name: "unknown", known: "", target: "node", kind: ErrUnknownHost},
		{name: "changed", known: knownhosts.Line([]string{hostport}, otherKey.PublicKey()) + "\n", target: "node", kind: ErrHostKeyChanged},
		{name: "jump host unknown", known: "", target: "behind", kind: ErrUnknownHost, jump: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kh := writeFile(t, filepath.Join(t.TempDir(), "known_hosts"), tc.known, 0o600)
			conf := fmt.Sprintf("Host node\n  HostName 127.0.0.1\n  Port %d\n  User u\n"+
				"Host behind\n  HostName 192.0.2.1\n  ProxyJump node\n", port)
			cfg := Config{
				SSHConfigFile: writeFile(t, filepath.Join(home, "ssh_config"), conf, 0o600),
				KnownHosts:    kh,
			}
			check := func(t *testing.T, err error) {
				t.Helper()
				var hke *HostKeyError
				if !errors.As(err, &hke) {
					t.Fatalf("errors.As(*HostKeyError) fails for %v", err)
				}
				if hke.Kind != tc.kind || !errors.Is(err, tc.kind) {
					t.Errorf("kind %v, want %v", hke.Kind, tc.kind)
				}
				if hke.Fingerprint != ssh.FingerprintSHA256(serverKey.PublicKey()) {
					t.Errorf("fingerprint %s, want the server's", hke.Fingerprint)
				}
				if tc.jump && !strings.Contains(err.Error(), "jump host node") {
					t.Errorf("error does not name the jump host: %v", err)
				}
			}
			_, err := Dial(context.Background(), tc.target, cfg)
			check(t, err)

			remotes, err := DialAll(context.Background(), []string{tc.target}, cfg, 0)
			closeRemotes(remotes)
			var merr *multierror.Error
			if !errors.As(err, &merr) {
				t.Fatalf("DialAll error is not a *multierror.Error: %v", err)
			}
			check(t, err)
			// As main wraps it.
			check(t, fmt.Errorf("%w:\n%w", errors.New("cannot reach every node"), err))
		})
	}
}

func TestDialSucceedsAndCloses(t *testing.T) {
	home := isolate(t)
	serverKey, _ := newTestKey(t)
	port := testSSHServer(t, serverKey)
	kh := writeFile(t, filepath.Join(home, "kh"), knownhosts.Line([]string{fmt.Sprintf("[127.0.0.1]:%d", port)}, serverKey.PublicKey())+"\n", 0o600)
	cfg := Config{SSHConfigFile: os.DevNull, KnownHosts: kh, Port: port, User: "u"}
	r, err := Dial(context.Background(), "127.0.0.1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Addr() != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("Addr = %q", r.Addr())
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
}

// TestSessionRefused: a session the server refuses is an error and no
// session, also for a caller whose ctx ended meanwhile (its late result
// is closed only if there is one: a nil *ssh.Session in a session
// interface crashed gorun on a Ctrl-C during a start).
func TestSessionRefused(t *testing.T) {
	home := isolate(t)
	serverKey, _ := newTestKey(t)
	port := testSSHServer(t, serverKey) // refuses every channel
	kh := writeFile(t, filepath.Join(home, "kh"), knownhosts.Line([]string{fmt.Sprintf("[127.0.0.1]:%d", port)}, serverKey.PublicKey())+"\n", 0o600)
	r, err := Dial(context.Background(), "127.0.0.1", Config{SSHConfigFile: os.DevNull, KnownHosts: kh, Port: port, User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if s, err := r.link.newSession(); err == nil || s != nil {
		t.Fatalf("a refused session: %v, %v; want an error and no session", s, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		if _, err := r.Output(ctx, []string{"true"}); err == nil {
			t.Fatal("a command ran on a server that refuses every session")
		}
	}
	time.Sleep(100 * time.Millisecond) // the late results, closed (or not) meanwhile
}

// TestDialCancelledDuringHandshake: a server that accepts TCP and never
// answers must not hold the dial past ctx's end.
func TestDialCancelledDuringHandshake(t *testing.T) {
	isolate(t)
	port, accepted := silentServer(t)
	cfg := Config{SSHConfigFile: os.DevNull, KnownHosts: os.DevNull, Port: port, ConnectTimeout: time.Minute}
	dials := []struct {
		name string
		dial func(ctx context.Context) error
	}{
		{"Dial", func(ctx context.Context) error { _, err := Dial(ctx, "127.0.0.1", cfg); return err }},
		{"DialAll", func(ctx context.Context) error {
			remotes, err := DialAll(ctx, []string{"127.0.0.1", "localhost"}, cfg, 0)
			closeRemotes(remotes)
			return err
		}},
	}
	for _, tc := range dials {
		t.Run(tc.name, func(t *testing.T) {
			before := accepted.Load()
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			start := time.Now()
			err := tc.dial(ctx)
			took := time.Since(start)
			if took > time.Second+200*time.Millisecond {
				t.Errorf("returned %v after the cancel, want within 1 s", took-200*time.Millisecond)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
			if accepted.Load() == before {
				t.Error("the server saw no connection: the cancel did not hit the handshake")
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
}

func TestDialWarnsOnceEvenWhenTheDialFails(t *testing.T) {
	home := isolate(t)
	port, _ := silentServer(t)
	conf := fmt.Sprintf("Host n*\n  HostName 127.0.0.1\n  Port %d\n  StrictHostKeyChecking no\n"+
		"Match exec \"true\"\n  User x\n", port)
	var mu sync.Mutex
	var warnings []string
	cfg := Config{
		SSHConfigFile:  writeFile(t, filepath.Join(home, "cfg"), conf, 0o600),
		KnownHosts:     os.DevNull,
		ConnectTimeout: 300 * time.Millisecond,
		Warn: func(msg string) {
			mu.Lock()
			warnings = append(warnings, msg)
			mu.Unlock()
		},
	}
	remotes, err := DialAll(context.Background(), []string{"n1", "n2", "n3"}, cfg, 0)
	closeRemotes(remotes)
	if err == nil {
		t.Fatal("dial to a silent server succeeded")
	}
	var strict, match int
	for _, w := range warnings {
		switch {
		case strings.Contains(w, "StrictHostKeyChecking no ignored"):
			strict++
		case strings.Contains(w, `"Match exec \"true\"" not supported`):
			match++
		default:
			t.Errorf("unexpected warning %q", w)
		}
	}
	// The StrictHostKeyChecking warning names the host, so one per host.
	if strict != 3 || match != 1 {
		t.Errorf("warnings %q: want the Match one once and one StrictHostKeyChecking per host", warnings)
	}
}

// encryptedKey returns an ed25519 key and its file content, passphrase-protected.
func encryptedKey(t *testing.T) (ed25519.PrivateKey, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "test", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	return priv, string(pem.EncodeToMemory(block))
}

// testAgent serves an ssh-agent holding keys on a unix socket and
// returns the socket's path.
func testAgent(t *testing.T, keys ...ed25519.PrivateKey) string {
	t.Helper()
	ring := sshagent.NewKeyring()
	for _, k := range keys {
		if err := ring.Add(sshagent.AddedKey{PrivateKey: k}); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptEach(ln, func(c net.Conn) { sshagent.ServeAgent(ring, c) })
	return sock
}

// acceptEach serves every connection ln accepts in a goroutine of its
// own, closing it after, until ln is closed.
func acceptEach(ln net.Listener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			serve(c)
		}()
	}
}

func TestConfigCheck(t *testing.T) {
	home := isolate(t)
	_, plainKey := newTestKey(t)
	encPriv, encKey := encryptedKey(t)
	plain := writeFile(t, filepath.Join(home, "plain"), string(plainKey), 0o600)
	loose := writeFile(t, filepath.Join(home, "loose"), string(plainKey), 0o644)
	groupOnly := writeFile(t, filepath.Join(home, "group"), string(plainKey), 0o640)
	enc := writeFile(t, filepath.Join(home, "enc"), encKey, 0o600)
	notKey := writeFile(t, filepath.Join(home, "notkey"), "hello\n", 0o600)
	kh := writeFile(t, filepath.Join(home, "known_hosts"), "", 0o600)
	fifo := filepath.Join(home, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	holding := testAgent(t, encPriv)
	empty := testAgent(t)

	tests := []struct {
		name  string
		cfg   Config
		agent string   // SSH_AUTH_SOCK
		want  []string // in the error; none: no error
		is    error
	}{
		{name: "nothing to check", cfg: Config{}},
		{name: "known_hosts exists", cfg: Config{KnownHosts: kh}},
		{name: "known_hosts missing", cfg: Config{KnownHosts: filepath.Join(home, "nope")},
			want: []string{"--known-hosts", "does not exist", "ssh-keyscan", "--ssh-accept-new"}, is: fs.ErrNotExist},
		{name: "known_hosts missing with accept-new", cfg: Config{KnownHosts: filepath.Join(home, "nope"), AcceptNew: true}},
		{name: "known_hosts is a FIFO", cfg: Config{KnownHosts: fifo}, want: []string{"--known-hosts", "named pipe (FIFO)"}},
		{name: "known_hosts with a host token is left to the dial", cfg: Config{KnownHosts: filepath.Join(home, "kh-%h")}},
		{name: "identity fine", cfg: Config{Identity: plain}},
		{name: "identity readable by others", cfg: Config{Identity: loose},
			want: []string{"--ssh-identity", "permissions 0644", "too open", "chmod 600 " + loose}},
		{name: "identity readable by the group", cfg: Config{Identity: groupOnly}, want: []string{"permissions 0640", "too open"}},
		{name: "identity missing", cfg: Config{Identity: filepath.Join(home, "gone")}, want: []string{"--ssh-identity"}, is: fs.ErrNotExist},
		{name: "identity not a key", cfg: Config{Identity: notKey}, want: []string{"not a private key"}},
		{name: "identity is a FIFO", cfg: Config{Identity: fifo}, want: []string{"--ssh-identity", "named pipe (FIFO)"}},
		{name: "encrypted, no agent", cfg: Config{Identity: enc},
			want: []string{"--ssh-identity", "passphrase-protected", "SSH_AUTH_SOCK is not set", "ssh-add " + enc}},
		{name: "encrypted, agent unreachable", cfg: Config{Identity: enc}, agent: filepath.Join(home, "no.sock"),
			want: []string{"passphrase-protected", "unreachable", "ssh-add"}},
		{name: "encrypted, agent without it", cfg: Config{Identity: enc}, agent: empty,
			want: []string{"passphrase-protected", "ssh-agent does not hold it", "ssh-add"}},
		{name: "encrypted, agent holds it", cfg: Config{Identity: enc}, agent: holding},
		{name: "ssh config is a FIFO", cfg: Config{SSHConfigFile: fifo}, want: []string{"ssh config", "named pipe (FIFO)"}},
		{name: "ssh config /dev/null", cfg: Config{SSHConfigFile: os.DevNull}},
		{name: "every problem at once", cfg: Config{KnownHosts: filepath.Join(home, "nope"), Identity: loose},
			want: []string{"--known-hosts", "too open"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SSH_AUTH_SOCK", tc.agent)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.cfg.Check(ctx)
			if d := time.Since(start); d > time.Second {
				t.Errorf("Check took %v", d)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one saying %q", tc.want)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v) fails: %v", tc.is, err)
			}
		})
	}
}

// TestDialAllChecksBeforeConnecting: a problem Check finds is reported
// once, and no node is contacted.
func TestDialAllChecksBeforeConnecting(t *testing.T) {
	home := isolate(t)
	port, accepted := silentServer(t)
	cfg := Config{SSHConfigFile: os.DevNull, KnownHosts: filepath.Join(home, "missing"), Port: port}
	remotes, err := DialAll(context.Background(), []string{"127.0.0.1", "localhost"}, cfg, 0)
	if len(remotes) != 0 {
		t.Errorf("remotes = %v", remotes)
	}
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("err = %v", err)
	}
	if strings.Count(err.Error(), "does not exist") != 1 {
		t.Errorf("reported more than once: %v", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d connections made before the check failed", n)
	}
}

func TestIdentityFilesFromSSHConfig(t *testing.T) {
	home := isolate(t)
	_, plainKey := newTestKey(t)
	_, encKey := encryptedKey(t)
	files := []string{
		writeFile(t, filepath.Join(home, "good"), string(plainKey), 0o600),
		writeFile(t, filepath.Join(home, "loose"), string(plainKey), 0o644),
		writeFile(t, filepath.Join(home, "enc"), encKey, 0o600),
		filepath.Join(home, "missing"),
	}
	var warnings []string
	a, err := newAuth(context.Background(), hostSettings{IdentityFiles: files}, false, func(m string) { warnings = append(warnings, m) })
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if len(a.keys) != 1 {
		t.Errorf("%d keys loaded, want the good one only", len(a.keys))
	}
	got := strings.Join(warnings, "\n")
	if len(warnings) != 1 || !strings.Contains(got, "too open") {
		t.Errorf("warnings = %q, want one for the loose key (none for the encrypted or the missing one)", warnings)
	}
	if d := a.describe(); !strings.Contains(d, "loose (refused") || !strings.Contains(d, "not in ssh-agent") {
		t.Errorf("describe = %q", d)
	}
}
