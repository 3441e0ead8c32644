package sshexec

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
)

// inputs is what the dials of one Dial or DialAll read, read once and
// shared by all of them: ssh_config with its Includes, the known_hosts
// files, the identity files and the ssh-agent connection. Read per dial,
// a cluster's ssh_config and known_hosts (an entry per node) cost the
// square of the node count.
//
// It is safe for concurrent use and holds no state past its fan-out:
// close ends the agent connection, and the next Dial or DialAll reads
// everything afresh. What a file said when it was read is what every dial
// of the fan-out uses (see knownHosts for the one exception, accept-new).
type inputs struct {
	cfg             Config // Warn deduplicated: warn's
	warn            *warner
	home, localUser string
	conf            *sshConfig
	confErr         error // every dial fails with it
	known           *knownHosts
	agent           *agentConn

	mu  sync.Mutex
	ids map[string]*identityEntry
}

// identityEntry is one identity file, read once.
type identityEntry struct {
	once sync.Once
	id   identity
	err  error
}

// newInputs reads ssh_config for Go's client (the rest is read on first
// use) and connects
// to ssh-agent lazily, within ctx, which bounds the fan-out: when it ends,
// the agent connection is cut.
func newInputs(ctx context.Context, cfg Config, w *warner) *inputs {
	in := &inputs{
		cfg:       cfg,
		warn:      w,
		home:      homeDir(),
		localUser: currentUser(),
		known:     newKnownHosts(),
		ids:       map[string]*identityEntry{},
	}
	if cfg.SSHCommand == nil { // the system's ssh reads its own
		in.conf, in.confErr = loadSSHConfig(cfg.SSHConfigFile, in.home)
	}
	if in.conf != nil {
		in.conf.home, in.conf.localUser = in.home, in.localUser
	}
	in.agent = newAgentConn(ctx)
	return in
}

// close ends the agent connection; a handshake still waiting on it (its
// dial already gave up) then returns.
func (in *inputs) close() { in.agent.close() }

// identity reads path once.
func (in *inputs) identity(path string) (identity, error) {
	in.mu.Lock()
	e := in.ids[path]
	if e == nil {
		e = &identityEntry{}
		in.ids[path] = e
	}
	in.mu.Unlock()
	e.once.Do(func() { e.id, e.err = readIdentity(path) })
	return e.id, e.err
}

// agentConn is one connection to the ssh-agent at SSH_AUTH_SOCK, made on
// first use and shared; x/crypto's agent client sends one request at a
// time on it (ssh-agent answers one at a time anyway). The agent's key
// list is asked once. Every wait on the agent is bounded by the caller's
// context; the request itself goes on until the agent answers or the
// connection is closed (close, or the end of the context it was made
// under), so a hung agent holds no dial past its own deadline.
type agentConn struct {
	ctx context.Context

	dialOnce sync.Once
	why      string // why there is no agent, or ""
	conn     net.Conn
	client   sshagent.ExtendedAgent
	stop     func() bool

	keys    lazy[[]*sshagent.Key]
	signers lazy[[]ssh.Signer]
}

func newAgentConn(ctx context.Context) *agentConn { return &agentConn{ctx: ctx} }

// connect connects once; it returns why there is no agent, or "".
func (a *agentConn) connect(ctx context.Context) string {
	a.dialOnce.Do(func() {
		sock := os.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			a.why = "SSH_AUTH_SOCK is not set (no ssh-agent)"
			return
		}
		// A unix socket connects at once or not at all; ctx bounds it anyway.
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
		if err != nil {
			a.why = fmt.Sprintf("the ssh-agent at SSH_AUTH_SOCK=%s is unreachable (%v)", sock, err)
			return
		}
		a.conn, a.client = c, sshagent.NewClient(c)
		a.stop = context.AfterFunc(a.ctx, func() { c.Close() })
	})
	return a.why
}

// list returns the agent's keys (asked once).
func (a *agentConn) list(ctx context.Context) ([]*sshagent.Key, error) {
	return a.keys.get(ctx, a.client.List)
}

// signerList returns the agent's signers (asked once).
func (a *agentConn) signerList(ctx context.Context) ([]ssh.Signer, error) {
	return a.signers.get(ctx, a.client.Signers)
}

func (a *agentConn) close() {
	a.dialOnce.Do(func() { a.why = "closed" }) // never connects after close
	if a.stop != nil {
		a.stop()
	}
	if a.conn != nil {
		a.conn.Close()
	}
}

// lazy is a value computed once, in the background, that each caller
// waits for as long as its own context lets it.
type lazy[T any] struct {
	once sync.Once
	done chan struct{}
	v    T
	err  error
}

func (l *lazy[T]) get(ctx context.Context, f func() (T, error)) (T, error) {
	l.once.Do(func() {
		l.done = make(chan struct{})
		go func() {
			defer close(l.done)
			l.v, l.err = f()
		}()
	})
	select {
	case <-l.done:
		return l.v, l.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
