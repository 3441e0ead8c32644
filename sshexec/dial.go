package sshexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
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
