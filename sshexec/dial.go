package sshexec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/shell"
	"golang.org/x/crypto/ssh"
)

// Config says how to reach nodes over SSH. Zero values defer to ssh_config
// and then to OpenSSH's defaults; non-zero values win over ssh_config, as
// command-line options do for ssh.
type Config struct {
	User          string // --ssh-user (ssh -l)
	Port          int    // --ssh-port (ssh -p)
	Identity      string // --ssh-identity (ssh -i): tried first, and must be usable (see Check)
	SSHConfigFile string // ssh -F: used alone instead of ~/.ssh/config and /etc/ssh/ssh_config
	// SSHCommand, set, is the system's ssh client (its program, then any
	// options of the user's) that reaches the nodes in place of Go's
	// client (system.go): --ssh-command.
	SSHCommand []string
	// KnownHosts replaces UserKnownHostsFile (default ~/.ssh/known_hosts).
	// Given, it must exist unless AcceptNew (see Check).
	KnownHosts string
	// AcceptNew records the key of a host not yet in known_hosts, like
	// StrictHostKeyChecking=accept-new. A changed key is refused regardless;
	// there is no way to turn verification off.
	AcceptNew bool
	// RemoteGorun is a gorun binary already installed on every node; set, it
	// skips the upload.
	RemoteGorun string
	// Agent is this gorun, to be run on the node from its content-addressed
	// copy and uploaded on first use when the node lacks it (see the
	// launcher in lazyagent.go). Unset, EnsureAgent must run before Start.
	Agent Binary
	// Others are builds of this gorun for other architectures, uploaded
	// in its place to a node of theirs (gorun-linux-arm64 beside an
	// amd64 gorun, for GH200 nodes).
	Others            []Binary
	ConnectTimeout    time.Duration // TCP connect plus SSH handshake; default ConnectTimeout or 10 s
	KeepaliveInterval time.Duration // default 3 s
	KeepaliveMax      int           // unanswered keepalives before the link is declared dead; default 3
	// Warn, when set, is told what a dial chose to ignore or skip: an
	// ssh_config setting gorun overrides (StrictHostKeyChecking no), a Match
	// block it cannot evaluate, an Include it could not read, an identity
	// file ssh would refuse. It is called before connecting, so also for a
	// dial that then fails; at most once per distinct message within one
	// Dial or DialAll, and never concurrently. A notice naming its node
	// that more than 8 nodes get alike is passed for the first 8, then
	// once more, when DialAll ends, as "N more nodes alike (HOSTLIST):
	// the first one's message". Nil drops them.
	Warn func(msg string)
	// Dialled, when set, is told as each of DialAll's hosts is reached or
	// failed, with how many are done of how many; one call at a time.
	Dialled func(done, total int)
}

// maxJumps bounds ProxyJump chains, so a "Host * / ProxyJump bastion" that
// also matches the bastion fails instead of recursing forever.
const maxJumps = 8

// Check finds what would make every dial fail for a reason to fix on this
// machine, before any connection, and says how to fix it: an ssh -F file
// that cannot be read; a --known-hosts file that does not exist (without
// AcceptNew every host would be unknown); a --ssh-identity that is missing,
// readable by others (OpenSSH refuses such a key), not a key, or
// passphrase-protected while no reachable ssh-agent holds it (gorun never
// prompts). Paths with per-host %-tokens are checked by each dial instead.
//
// Dial and DialAll run Check first; a caller may run it earlier still, to
// fail before other work. ctx bounds the talk with ssh-agent.
func (c Config) Check(ctx context.Context) error {
	var errs []error
	home := homeDir()
	if c.SSHCommand != nil {
		if len(c.SSHCommand) == 0 || c.SSHCommand[0] == "" {
			errs = append(errs, errNoSSHCommand)
		} else if _, err := exec.LookPath(c.SSHCommand[0]); err != nil {
			errs = append(errs, fmt.Errorf("--ssh-command: %w; install OpenSSH's client or name its path", err))
		}
	}
	if c.SSHConfigFile != "" && c.SSHCommand != nil {
		if f, err := os.Open(c.SSHConfigFile); err != nil {
			errs = append(errs, fmt.Errorf("ssh config: %w", err))
		} else {
			f.Close()
		}
	} else if c.SSHConfigFile != "" {
		if _, err := loadSSHConfig(c.SSHConfigFile, home); err != nil {
			errs = append(errs, err)
		}
	}
	tv := tokenValues{home: home, localUser: currentUser()}
	if c.KnownHosts != "" && !hasHostTokens(c.KnownHosts) {
		if err := checkKnownHosts(expandTokens(c.KnownHosts, tv), c.AcceptNew); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Identity != "" && !hasHostTokens(c.Identity) {
		s := hostSettings{IdentityFiles: []string{expandTokens(c.Identity, tv)}}
		a, err := newAuth(ctx, s, true, func(string) {})
		if err != nil {
			errs = append(errs, err)
		} else {
			a.close()
		}
	}
	return errors.Join(errs...)
}

// hasHostTokens reports whether path holds a %-token that only a host
// gives a value (%h %n %p %r).
func hasHostTokens(path string) bool {
	for _, t := range []string{"%h", "%n", "%p", "%r"} {
		if strings.Contains(strings.ReplaceAll(path, "%%", ""), t) {
			return true
		}
	}
	return false
}

// checkKnownHosts makes sure an explicit --known-hosts file can be used:
// it must be a readable regular file, and must exist unless acceptNew
// (which creates it on the first recorded key).
func checkKnownHosts(path string, acceptNew bool) error {
	_, err := readFile(path, maxKnownHosts)
	switch {
	case err == nil, acceptNew && errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--known-hosts %s does not exist, so every node's host key would be unknown: "+
			"create it with the nodes' keys (ssh-keyscan NODE... >> %s, after checking their fingerprints), or run with --ssh-accept-new to record them on first connection: %w",
			path, shell.Quote(path), err)
	default:
		return fmt.Errorf("--known-hosts: %w", err)
	}
}

// warner passes each distinct message to a Warn callback once, one call at
// a time, however many dials run in parallel. A notice about one node
// (forHost) that more than collapseAbove nodes get alike is passed for
// the first collapseAbove of them; flush then says, in one message, which
// others got it too.
type warner struct {
	fn    func(string)
	mu    sync.Mutex
	seen  map[string]bool
	alike hosts.Alike
}

// withWarner returns cfg with Warn deduplicated (and never nil), and the
// warner behind it.
func withWarner(cfg Config) (Config, *warner) {
	w := &warner{fn: cfg.Warn, seen: map[string]bool{}, alike: hosts.Alike{Show: collapseAbove}}
	cfg.Warn = w.warn
	return cfg, w
}

func (w *warner) warn(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.say(msg)
}

func (w *warner) say(msg string) {
	if w.seen[msg] || w.fn == nil {
		return
	}
	w.seen[msg] = true
	w.fn(msg)
}

// forHost passes msg, a notice that may name host, collapsing it with the
// same notice for other hosts past collapseAbove of them.
func (w *warner) forHost(host, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[msg] || w.fn == nil || host == "" || !strings.Contains(msg, host) ||
		w.alike.Add(host, strings.ReplaceAll(msg, host, "\x00"), msg) {
		w.say(msg)
		return
	}
	w.seen[msg] = true
}

// flush says which nodes got a collapsed notice too.
func (w *warner) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range w.alike.Flush() {
		w.fn(line)
	}
}

// Dial connects to host ("node1", "alice@node1", "node1:2222") the way
// `ssh host` would: ssh_config, ssh-agent, identity files, ProxyJump, and
// host keys verified against known_hosts. It runs cfg.Check first. ctx
// bounds the whole dial, the SSH handshake included (the connection is
// closed when ctx ends); ConnectTimeout bounds each hop.
func Dial(ctx context.Context, host string, cfg Config) (*Remote, error) {
	cfg, w := withWarner(cfg)
	if err := cfg.Check(ctx); err != nil {
		return nil, fmt.Errorf("node %s: %w", host, err)
	}
	in := newInputs(ctx, cfg, w)
	defer in.close()
	r, err := in.dial(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", host, err)
	}
	return r, nil
}

// dial connects to host with the fan-out's inputs; its error does not name
// host (DialAll's *HostError does).
func (in *inputs) dial(ctx context.Context, host string) (*Remote, error) {
	if in.cfg.SSHCommand != nil {
		return dialSystem(ctx, host, in.cfg) // ssh reads its own config
	}
	if in.confErr != nil {
		return nil, in.confErr
	}
	return in.dialVia(ctx, host, in.cfg, nil, 0)
}

// dialVia connects to target, through via (explicit jump hops, last one
// nearest the target) or else through the target's own ProxyJump.
func (in *inputs) dialVia(ctx context.Context, target string, cfg Config, via []string, depth int) (*Remote, error) {
	if depth > maxJumps {
		return nil, fmt.Errorf("ProxyJump chain longer than %d hops (does a Host pattern make the jump host jump through itself?)", maxJumps)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := resolveHost(target, cfg, in.conf)
	for _, w := range s.Warnings {
		in.warn.forHost(s.Alias, w)
	}
	if err != nil {
		return nil, err
	}
	if via == nil && s.ProxyJump != "" {
		via = strings.Split(s.ProxyJump, ",")
	}

	var jump *Remote
	if len(via) > 0 {
		// Command-line user and port are for the destination, not the hops
		// (as with ssh -l/-p and -J).
		hopCfg := cfg
		hopCfg.User, hopCfg.Port = "", 0
		hop := strings.TrimSpace(via[len(via)-1])
		rest := via[:len(via)-1]
		if len(rest) == 0 {
			rest = nil // the first hop follows its own ssh_config
		}
		jump, err = in.dialVia(ctx, hop, hopCfg, rest, depth+1)
		if err != nil {
			return nil, fmt.Errorf("jump host %s: %w", hop, err)
		}
	}
	r, err := in.connect(ctx, target, s, cfg, jump)
	if err != nil {
		if jump != nil {
			jump.Close()
		}
		return nil, err
	}
	return r, nil
}

// connect dials s.HostName (directly or through jump), authenticates and
// verifies the host key, then starts the keepalive.
func (in *inputs) connect(ctx context.Context, target string, s hostSettings, cfg Config, jump *Remote) (*Remote, error) {
	addr := net.JoinHostPort(s.HostName, strconv.Itoa(s.Port))
	keyName := addr
	if s.HostKeyAlias != "" {
		keyName = net.JoinHostPort(s.HostKeyAlias, strconv.Itoa(s.Port))
	}
	if cfg.KnownHosts != "" && hasHostTokens(cfg.KnownHosts) {
		if err := checkKnownHosts(s.KnownHosts[0], s.AcceptNew); err != nil {
			return nil, err
		}
	}
	hk := &hostKeys{userFiles: s.KnownHosts, globalFiles: s.GlobalKnown, acceptNew: s.AcceptNew, hash: s.HashKnownHosts, known: in.known}
	algos, err := hk.algorithms(keyName)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, s.ConnectTimeout)
	defer cancel()
	auth, err := newAuthFrom(ctx, s, cfg.Identity != "", cfg.Warn, in)
	if err != nil {
		return nil, err
	}
	defer auth.close()
	var conn net.Conn
	if jump != nil {
		conn, err = jump.link.(goLink).DialContext(ctx, "tcp", addr) // a hop is always Go's client
	} else {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, timeoutHint(err, ctx, s.ConnectTimeout))
	}

	clientCfg := &ssh.ClientConfig{
		User:              s.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeysCallback(auth.signers)},
		HostKeyCallback:   hk.callback(keyName),
		HostKeyAlgorithms: algos,
	}
	c, chans, reqs, err := handshake(ctx, conn, addr, clientCfg, auth)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("ssh handshake with %s: %w", addr, timeoutHint(ctx.Err(), ctx, s.ConnectTimeout))
	}
	if err != nil {
		var hke *HostKeyError
		if errors.As(err, &hke) {
			return nil, hostKeyErr(err)
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, fmt.Errorf("login as %s@%s refused (tried %s); check --ssh-user, --ssh-identity, ssh-agent or the node's authorized_keys: %w",
				s.User, addr, auth.describe(), err)
		}
		return nil, fmt.Errorf("ssh handshake with %s: %w", addr, err)
	}

	client := ssh.NewClient(c, chans, reqs)
	r := &Remote{
		node:  target,
		addr:  addr,
		user:  s.User,
		cfg:   cfg,
		link:  goLink{client},
		jump:  jump,
		dead:  make(chan struct{}),
		procs: map[Process]struct{}{},
	}
	go r.watch()
	go r.keepalive(client, durationOr(cfg.KeepaliveInterval, DefaultKeepaliveInterval), intOr(cfg.KeepaliveMax, DefaultKeepaliveMax))
	return r, nil
}

// handshake runs the SSH handshake on conn, returning as soon as ctx ends.
// ssh.NewClientConn takes no context, and may also wait on ssh-agent (for
// its keys) or on a server that accepted the connection and says nothing;
// so it runs on its own goroutine, and ctx's end closes conn and the agent
// connection, which makes it return. When ctx ended, the connection is
// closed (also if the handshake completed in the meantime) and err is
// ctx's.
func handshake(ctx context.Context, conn net.Conn, addr string, cfg *ssh.ClientConfig, a *auth) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, error) {
	type result struct {
		c     ssh.Conn
		chans <-chan ssh.NewChannel
		reqs  <-chan *ssh.Request
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
		done <- result{c, chans, reqs, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			conn.Close()
			return nil, nil, nil, res.err
		}
		if ctx.Err() != nil { // ended at the same moment: honour it
			res.c.Close()
			return nil, nil, nil, ctx.Err()
		}
		return res.c, res.chans, res.reqs, nil
	case <-ctx.Done():
		conn.Close()
		a.close()
		go func() {
			if res := <-done; res.err == nil {
				res.c.Close()
			}
		}()
		return nil, nil, nil, ctx.Err()
	}
}

// hostKeyErr unwraps the handshake's wrapping so the message leads with the
// host key problem, keeping errors.Is working.
func hostKeyErr(err error) error {
	var hke *HostKeyError
	errors.As(err, &hke)
	msg := err.Error()
	if i := strings.Index(msg, hke.Error()); i >= 0 {
		if rest := msg[i+len(hke.Error()):]; rest != "" {
			return fmt.Errorf("%w%s", hke, rest)
		}
	}
	return hke
}

func timeoutHint(err error, ctx context.Context, d time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %v (ConnectTimeout): %w", d, err)
	}
	return err
}

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func intOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}
