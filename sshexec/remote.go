package sshexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/shell"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
)

// Config says how to reach nodes over SSH. Zero values defer to ssh_config
// and then to OpenSSH's defaults; non-zero values win over ssh_config, as
// command-line options do for ssh.
type Config struct {
	User          string // --ssh-user (ssh -l)
	Port          int    // --ssh-port (ssh -p)
	Identity      string // --ssh-identity (ssh -i): tried first
	SSHConfigFile string // ssh -F: used alone instead of ~/.ssh/config and /etc/ssh/ssh_config
	// KnownHosts replaces UserKnownHostsFile (default ~/.ssh/known_hosts).
	KnownHosts string
	// AcceptNew records the key of a host not yet in known_hosts, like
	// StrictHostKeyChecking=accept-new. A changed key is refused regardless;
	// there is no way to turn verification off.
	AcceptNew bool
	// RemoteGorun is a gorun binary already installed on every node; set, it
	// skips the upload.
	RemoteGorun string
	// Agent is this gorun, to be run on the node from its content-addressed
	// copy and uploaded on first use when the node lacks it (see agent.go's
	// launcher in lazyagent.go). Unset, EnsureAgent must run before Start.
	Agent             Binary
	ConnectTimeout    time.Duration // TCP connect plus SSH handshake; default ConnectTimeout or 10 s
	KeepaliveInterval time.Duration // default 3 s
	KeepaliveMax      int           // unanswered keepalives before the link is declared dead; default 3
}

// Remote is a Runner for one node over one SSH connection, reused for every
// command and job. It is safe for concurrent use. OpenSSH's sshd allows 10
// sessions per connection at once by default (MaxSessions).
type Remote struct {
	node     string
	addr     string // host:port actually dialled
	user     string
	cfg      Config
	client   *ssh.Client
	jump     *Remote // the ProxyJump hop, owned by this Remote
	warnings []string

	dead    chan struct{} // closed when the connection is gone
	deadErr error         // why; written before dead is closed

	mu     sync.Mutex
	closed bool
	procs  map[Process]struct{}

	upload uploadCache
}

var _ Runner = (*Remote)(nil)

// maxJumps bounds ProxyJump chains, so a "Host * / ProxyJump bastion" that
// also matches the bastion fails instead of recursing forever.
const maxJumps = 8

// Dial connects to host ("node1", "alice@node1", "node1:2222") the way
// `ssh host` would: ssh_config, ssh-agent, identity files, ProxyJump, and
// host keys verified against known_hosts. ctx bounds the whole dial;
// ConnectTimeout bounds each hop.
func Dial(ctx context.Context, host string, cfg Config) (*Remote, error) {
	conf, err := loadSSHConfig(cfg.SSHConfigFile, homeDir())
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", host, err)
	}
	r, err := dial(ctx, host, cfg, conf, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", host, err)
	}
	return r, nil
}

// dial connects to target, through via (explicit jump hops, last one
// nearest the target) or else through the target's own ProxyJump.
func dial(ctx context.Context, target string, cfg Config, conf *sshConfig, via []string, depth int) (*Remote, error) {
	if depth > maxJumps {
		return nil, fmt.Errorf("ProxyJump chain longer than %d hops (does a Host pattern make the jump host jump through itself?)", maxJumps)
	}
	s, err := resolveHost(target, cfg, conf)
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
		jump, err = dial(ctx, hop, hopCfg, conf, rest, depth+1)
		if err != nil {
			return nil, fmt.Errorf("jump host %s: %w", hop, err)
		}
	}
	r, err := connect(ctx, target, s, cfg, jump)
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
func connect(ctx context.Context, target string, s hostSettings, cfg Config, jump *Remote) (*Remote, error) {
	addr := net.JoinHostPort(s.HostName, strconv.Itoa(s.Port))
	keyName := addr
	if s.HostKeyAlias != "" {
		keyName = net.JoinHostPort(s.HostKeyAlias, strconv.Itoa(s.Port))
	}
	hk := &hostKeys{userFiles: s.KnownHosts, globalFiles: s.GlobalKnown, acceptNew: s.AcceptNew, hash: s.HashKnownHosts}
	algos, err := hk.algorithms(keyName)
	if err != nil {
		return nil, err
	}
	auth, err := newAuth(s, cfg.Identity != "")
	if err != nil {
		return nil, err
	}
	defer auth.close()

	ctx, cancel := context.WithTimeout(ctx, s.ConnectTimeout)
	defer cancel()
	var conn net.Conn
	if jump != nil {
		conn, err = jump.client.DialContext(ctx, "tcp", addr)
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
	// The handshake has no context of its own: closing the connection is
	// what interrupts it.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, clientCfg)
	if !stop() {
		if err == nil {
			c.Close()
		}
		return nil, fmt.Errorf("ssh handshake with %s: %w", addr, timeoutHint(ctx.Err(), ctx, s.ConnectTimeout))
	}
	if err != nil {
		conn.Close()
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

	r := &Remote{
		node:     target,
		addr:     addr,
		user:     s.User,
		cfg:      cfg,
		client:   ssh.NewClient(c, chans, reqs),
		jump:     jump,
		warnings: s.Warnings,
		dead:     make(chan struct{}),
		procs:    map[Process]struct{}{},
	}
	if jump != nil {
		r.warnings = append(append([]string{}, jump.warnings...), r.warnings...)
	}
	go r.watch()
	go r.keepalive(durationOr(cfg.KeepaliveInterval, DefaultKeepaliveInterval), intOr(cfg.KeepaliveMax, DefaultKeepaliveMax))
	return r, nil
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

// watch records when and why the connection ends.
func (r *Remote) watch() {
	err := r.client.Wait()
	r.mu.Lock()
	if r.deadErr == nil {
		r.deadErr = err
	}
	r.mu.Unlock()
	close(r.dead)
}

// keepalive sends keepalive@openssh.com every interval; after max
// consecutive requests unanswered within interval, it closes the
// connection, so every session's Wait returns an error. Any reply, even a
// refusal, proves the peer alive.
func (r *Remote) keepalive(interval time.Duration, max int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-r.dead:
			return
		case <-t.C:
		}
		reply := make(chan error, 1)
		go func() {
			_, _, err := r.client.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		timer := time.NewTimer(interval)
		select {
		case <-r.dead:
			timer.Stop()
			return
		case err := <-reply:
			timer.Stop()
			if err != nil {
				return // connection already closed; watch reports it
			}
			missed = 0
			continue
		case <-timer.C:
			missed++
		}
		if missed >= max {
			r.mu.Lock()
			if r.deadErr == nil && !r.closed {
				r.deadErr = fmt.Errorf("connection lost: %d keepalives in a row unanswered (one every %v)", missed, interval)
			}
			r.mu.Unlock()
			r.client.Close()
			return
		}
	}
}

// lostAfter is lost for a session that ended without an exit status: that
// is the connection going down, and the watcher may not have recorded why
// yet, so it waits a moment for it.
func (r *Remote) lostAfter(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.dead:
	case <-t.C:
	}
	return r.lost()
}

// lost returns why the connection ended, or nil if it is still up.
func (r *Remote) lost() error {
	select {
	case <-r.dead:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			return ErrClosed
		}
		if r.deadErr == nil || errors.Is(r.deadErr, io.EOF) {
			return errors.New("connection lost")
		}
		return r.deadErr
	default:
		return nil
	}
}

// Node implements Runner: the name the node was dialled by.
func (r *Remote) Node() string { return r.node }

// Addr is the host:port the connection goes to.
func (r *Remote) Addr() string { return r.addr }

// Warnings lists what the dial chose to ignore (for example
// StrictHostKeyChecking=no in ssh_config), for the caller to show.
func (r *Remote) Warnings() []string { return append([]string(nil), r.warnings...) }

// Done is closed when the connection is gone (closed, or lost).
func (r *Remote) Done() <-chan struct{} { return r.dead }

// newSession opens a session, giving up when ctx ends or the link dies.
func (r *Remote) newSession(ctx context.Context) (*ssh.Session, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	type result struct {
		s   *ssh.Session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := r.client.NewSession()
		ch <- result{s, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			if lost := r.lost(); lost != nil {
				return nil, fmt.Errorf("open session: %w", lost)
			}
			return nil, fmt.Errorf("open session: %w", res.err)
		}
		return res.s, nil
	case <-ctx.Done():
		go func() {
			if res := <-ch; res.s != nil {
				res.s.Close()
			}
		}()
		return nil, fmt.Errorf("open session: %w", ctx.Err())
	}
}

// stderrTail is how much of a failed command's stderr goes into its error.
const stderrTail = 2048

// Output implements Runner. argv is joined with shell.QuoteArgv and run by the
// remote user's shell. When ctx ends, the session is closed and Output
// returns; the remote command then sees its stdin and output close.
func (r *Remote) Output(ctx context.Context, argv []string) ([]byte, error) {
	out, err := r.output(ctx, argv, nil)
	if err != nil {
		return out, fmt.Errorf("node %s: %w", r.node, err)
	}
	return out, nil
}

func (r *Remote) output(ctx context.Context, argv []string, stdin io.Reader) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("run: empty command")
	}
	return r.run(ctx, shell.QuoteArgv(argv), stdin)
}

// outputCmd runs a command line already quoted; errors wrap *ssh.ExitError
// when the command ran and exited non-zero.
func (r *Remote) outputCmd(ctx context.Context, cmd string) ([]byte, error) {
	return r.run(ctx, cmd, nil)
}

func (r *Remote) run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	sess, err := r.newSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", cmd, err)
	}
	defer sess.Close()
	var stdout, stderr bytes.Buffer
	sess.Stdout, sess.Stderr, sess.Stdin = &stdout, &stderr, stdin
	done := make(chan error, 1)
	go func() { done <- sess.Run(cmd) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		sess.Close()
		return nil, fmt.Errorf("run %s: %w", cmd, ctx.Err())
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	tail := strings.TrimSpace(lastBytes(stderr.Bytes(), stderrTail))
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &ExitError{Cmd: cmd, Code: ee.ExitStatus(), Stderr: tail}
	}
	if lost := r.lostAfter(2 * time.Second); lost != nil {
		err = lost
	}
	return stdout.Bytes(), fmt.Errorf("run %s: %w", cmd, err)
}

// ExitError is a command that ran on the node and exited non-zero.
type ExitError struct {
	Cmd    string
	Code   int
	Stderr string // its last bytes
}

func (e *ExitError) Error() string {
	if e.Stderr == "" {
		return fmt.Sprintf("run %s: exit code %d", e.Cmd, e.Code)
	}
	return fmt.Sprintf("run %s: exit code %d: %s", e.Cmd, e.Code, e.Stderr)
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		return "…" + string(b[len(b)-n:])
	}
	return string(b)
}

// Start implements Runner: it runs the node agent (`<remote gorun> _agent`)
// in a session and hands it job. The remote gorun is Config.RemoteGorun or
// the path EnsureAgent uploaded to; one of them must be set first. ctx
// bounds starting only; a started job is stopped with Stop.
func (r *Remote) Start(ctx context.Context, job Job, stdout, stderr io.Writer) (Process, error) {
	p, err := r.start(ctx, job, stdout, stderr)
	if err != nil {
		return nil, fmt.Errorf("node %s: start agent: %w", r.node, err)
	}
	return p, nil
}

func (r *Remote) start(ctx context.Context, job Job, stdout, stderr io.Writer) (Process, error) {
	gorun := r.agentPath()
	if gorun == "" && r.cfg.Agent.Name == "" {
		return nil, errors.New("no gorun on the node: set --remote-gorun or upload it first (EnsureAgent)")
	}
	sess, err := r.newSession(ctx)
	if err != nil {
		return nil, err
	}
	stdin, err := sess.StdinPipe()
	var outR, errR io.Reader
	if err == nil {
		outR, err = sess.StdoutPipe()
	}
	if err == nil {
		errR, err = sess.StderrPipe()
	}
	if err == nil {
		if gorun != "" {
			err = sess.Start(shell.QuoteArgv([]string{gorun, "_agent"}))
		} else {
			err = sess.Start(launchCommand(r.cfg.Agent, true, "_agent"))
		}
	}
	if err != nil {
		sess.Close()
		return nil, err
	}
	if gorun == "" {
		// The launcher names the copy it runs, or nothing when the node
		// lacks it: then upload it and start again, in a new session.
		path, err := readLauncherLine(outR)
		if err != nil {
			sess.Close()
			if _, err := r.EnsureAgent(ctx, r.cfg.Agent); err != nil {
				return nil, err
			}
			return r.start(ctx, job, stdout, stderr)
		}
		r.knowAgent(path)
	}

	tracked := &remoteProcess{r: r}
	wait := func() (int, error) {
		err := sess.Wait()
		sess.Close()
		r.forget(tracked)
		var ee *ssh.ExitError
		switch {
		case err == nil:
			return 0, nil
		case errors.As(err, &ee):
			return ee.ExitStatus(), nil
		}
		if lost := r.lostAfter(2 * time.Second); lost != nil {
			return -1, fmt.Errorf("node %s: agent lost: %w", r.node, lost)
		}
		return -1, fmt.Errorf("node %s: agent lost: %w", r.node, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock() // wait's forget waits for the registration below
	p, err := attachAgent(job, stdin, outR, errR, stdout, stderr, wait)
	if err != nil {
		return nil, err
	}
	tracked.Process = p
	if r.closed {
		p.Stop(true)
	} else {
		r.procs[tracked] = struct{}{}
	}
	return tracked, nil
}

// remoteProcess is an agent's Process, known to its Remote until it ends.
type remoteProcess struct {
	Process
	r *Remote
}

func (r *Remote) forget(p *remoteProcess) {
	r.mu.Lock()
	delete(r.procs, p)
	r.mu.Unlock()
}

// closeWait bounds how long Close waits for stopped jobs before cutting
// the connection (the agents then see EOF and kill what is left).
const closeWait = 10 * time.Second

// Close implements Runner: running jobs are stopped (SIGTERM, grace,
// SIGKILL) and waited for up to 10 s, then the connection (and any jump
// connection) is closed.
func (r *Remote) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	procs := make([]Process, 0, len(r.procs))
	for p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()

	for _, p := range procs {
		p.Stop(false)
	}
	deadline := time.NewTimer(closeWait)
	defer deadline.Stop()
	for _, p := range procs {
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-deadline.C:
		case <-r.dead:
		}
	}
	err := r.client.Close()
	<-r.dead
	if r.jump != nil {
		r.jump.Close()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("node %s: close: %w", r.node, err)
	}
	return nil
}

// auth holds the keys offered for one login.
type auth struct {
	keys    []ssh.Signer
	agent   sshagent.ExtendedAgent
	conn    net.Conn
	only    bool            // IdentitiesOnly: agent keys only if they match a file
	allowed map[string]bool // public keys of the identity files (for IdentitiesOnly)
	tried   []string

	once sync.Once
	list []ssh.Signer
}

// defaultIdentities are OpenSSH's default identity files, in its order.
var defaultIdentities = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// newAuth loads the identity files and connects to ssh-agent (SSH_AUTH_SOCK).
// A missing explicit --ssh-identity is an error; missing ssh_config or
// default identities are skipped, as ssh does. A passphrase-protected key
// is used through the agent if the agent holds it.
func newAuth(s hostSettings, explicitFirst bool) (*auth, error) {
	a := &auth{only: s.IdentitiesOnly, allowed: map[string]bool{}}
	files := s.IdentityFiles
	if len(files) == 0 {
		for _, f := range defaultIdentities {
			files = append(files, homeDir()+"/.ssh/"+f)
		}
	}
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if i == 0 && explicitFirst {
				return nil, fmt.Errorf("--ssh-identity: %w", err)
			}
			continue
		}
		signer, err := ssh.ParsePrivateKey(b)
		var pm *ssh.PassphraseMissingError
		switch {
		case err == nil:
			a.keys = append(a.keys, signer)
			a.allowed[string(signer.PublicKey().Marshal())] = true
			a.tried = append(a.tried, fmt.Sprintf("%s (%s)", f, ssh.FingerprintSHA256(signer.PublicKey())))
		case errors.As(err, &pm):
			if pm.PublicKey != nil {
				a.allowed[string(pm.PublicKey.Marshal())] = true
			} else if pub, err := os.ReadFile(f + ".pub"); err == nil {
				if k, _, _, _, err := ssh.ParseAuthorizedKey(pub); err == nil {
					a.allowed[string(k.Marshal())] = true
				}
			}
			a.tried = append(a.tried, f+" (passphrase: agent only)")
		default:
			if i == 0 && explicitFirst {
				return nil, fmt.Errorf("--ssh-identity %s: %w", f, err)
			}
			a.tried = append(a.tried, fmt.Sprintf("%s (unreadable: %v)", f, err))
		}
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			a.conn, a.agent = c, sshagent.NewClient(c)
		}
	}
	return a, nil
}

// signers lists the file keys first, then the agent's (only those matching
// an identity file under IdentitiesOnly), without duplicates.
func (a *auth) signers() ([]ssh.Signer, error) {
	a.once.Do(func() { a.list = a.collect() })
	return a.list, nil
}

func (a *auth) collect() []ssh.Signer {
	out := append([]ssh.Signer(nil), a.keys...)
	seen := map[string]bool{}
	for _, k := range a.keys {
		seen[string(k.PublicKey().Marshal())] = true
	}
	if a.agent != nil {
		ks, err := a.agent.Signers()
		if err == nil {
			n := 0
			for _, k := range ks {
				pk := string(k.PublicKey().Marshal())
				if seen[pk] || (a.only && !a.allowed[pk]) {
					continue
				}
				seen[pk] = true
				out = append(out, k)
				n++
			}
			a.tried = append(a.tried, fmt.Sprintf("%d ssh-agent key(s)", n))
		}
	}
	return out
}

func (a *auth) describe() string {
	if len(a.tried) == 0 {
		return "no keys: none found in ~/.ssh and no ssh-agent"
	}
	return strings.Join(a.tried, ", ")
}

func (a *auth) close() {
	if a.conn != nil {
		a.conn.Close()
	}
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
