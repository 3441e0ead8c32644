package sshexec

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// The transport over the system's OpenSSH client (Config.SSHCommand,
// --ssh-command): for nodes that `ssh node` reaches and Go's client does
// not (Kerberos/GSSAPI, a hardware token in an agent, hostbased login, a
// ProxyCommand, Match exec, options Go's client lacks). One master process
// per node holds the connection (ControlMaster), its control socket in a
// folder only this user can enter (controlDir); every session is a short
// `ssh -S socket` client over it, so the login happens once per node, as
// with Go's client.
//
// ssh reads its own ssh_config, keys, agent, certificates and known_hosts.
// gorun adds only what keeps it safe and headless, on the command line,
// which ssh_config cannot override: BatchMode (never a prompt),
// StrictHostKeyChecking yes (accept-new with --ssh-accept-new) over any
// "no" in ssh_config, and its keepalive (ServerAliveInterval and
// ServerAliveCountMax, 3 s and 3 by default): a node that stops answering
// ends the master, and every session with it. The ssh processes run in a
// process group of their own, so a Ctrl-C at the terminal reaches gorun
// alone, which then stops the job through them; and they get SIGTERM if
// gorun dies, so the nodes' agents see their link close and stop the job.

// systemLink is a master ssh process and its control socket.
type systemLink struct {
	argv   []string // the ssh command, its options and gorun's, before the destination
	host   string
	sock   string // the control socket, in controlDir
	master *exec.Cmd
	done   chan struct{} // closed once the master has exited
	err    error         // why it exited; written before done is closed
}

// systemReadyFactor bounds a system master's login: this many times the
// connect timeout, since a login through ProxyJump hops is several.
const systemReadyFactor = 3

// dialSystem connects to host with the system ssh: its master up and
// logged in, or an error with what ssh said.
func dialSystem(ctx context.Context, host string, cfg Config) (*Remote, error) {
	if strings.HasPrefix(host, "-") {
		return nil, fmt.Errorf("host %q: a node name cannot start with '-'", host)
	}
	argv := systemArgv(cfg)
	addr, user, err := systemResolve(ctx, argv, host)
	if err != nil {
		return nil, err
	}
	sock, err := controlSocket()
	if err != nil {
		return nil, err
	}
	l := &systemLink{argv: argv, host: host, sock: sock, done: make(chan struct{})}
	stderr := &wire.Tail{Max: 4096} // read once the master has exited
	l.master = exec.Command(argv[0], append(argv[1:], "-o", "ControlMaster=yes", "-o", "ControlPersist=no",
		"-o", "ControlPath="+l.sock, "-N", "-T", "--", host)...)
	l.master.Stderr = stderr
	l.master.SysProcAttr = systemProcAttr()
	if err := l.master.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	go func() {
		err := l.master.Wait()
		if tail := strings.Join(strings.Fields(stderr.String()), " "); tail != "" {
			err = fmt.Errorf("%s (%w)", tail, err)
		}
		l.err = err
		close(l.done)
	}()
	bound := systemReadyFactor * durationOr(cfg.ConnectTimeout, DefaultConnectTimeout)
	if err := l.ready(ctx, bound); err != nil {
		l.close()
		return nil, fmt.Errorf("%w; the same login by hand: %s", err, loginHint(cfg, argv, host))
	}
	r := &Remote{
		node:  host,
		addr:  addr,
		user:  user,
		cfg:   cfg,
		link:  l,
		dead:  make(chan struct{}),
		procs: map[Process]struct{}{},
	}
	go r.watch()
	return r, nil
}

// systemArgv is the ssh command line up to the destination: the user's
// command and options, then gorun's (see the comment at the top).
func systemArgv(cfg Config) []string {
	argv := append([]string{}, cfg.SSHCommand...)
	if cfg.SSHConfigFile != "" {
		argv = append(argv, "-F", cfg.SSHConfigFile)
	}
	if cfg.User != "" {
		argv = append(argv, "-l", cfg.User)
	}
	if cfg.Port != 0 {
		argv = append(argv, "-p", strconv.Itoa(cfg.Port))
	}
	if cfg.Identity != "" {
		argv = append(argv, "-i", cfg.Identity)
	}
	if cfg.KnownHosts != "" {
		argv = append(argv, "-o", "UserKnownHostsFile="+cfg.KnownHosts)
	}
	strict := "yes"
	if cfg.AcceptNew {
		strict = "accept-new"
	}
	argv = append(argv, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking="+strict,
		"-o", "ServerAliveInterval="+strconv.Itoa(int(max(time.Second, durationOr(cfg.KeepaliveInterval, DefaultKeepaliveInterval)).Seconds())),
		"-o", "ServerAliveCountMax="+strconv.Itoa(intOr(cfg.KeepaliveMax, DefaultKeepaliveMax)))
	if cfg.ConnectTimeout > 0 {
		argv = append(argv, "-o", "ConnectTimeout="+strconv.Itoa(int(max(time.Second, cfg.ConnectTimeout).Seconds())))
	}
	return argv
}

// loginHint is the login dialSystem tried, to try by hand: --ssh-command's
// options are not repeated (one may hold a secret, as sshpass -p does).
func loginHint(cfg Config, argv []string, host string) string {
	words := append([]string{}, argv[0])
	if len(cfg.SSHCommand) > 1 {
		words = append(words, "[--ssh-command's options]")
	}
	words = append(words, argv[len(cfg.SSHCommand):]...)
	return strings.Join(append(words, host, "true"), " ")
}

// systemResolve asks ssh where host leads (ssh -G): the address dialled
// and the user logged in as.
func systemResolve(ctx context.Context, argv []string, host string) (addr, user string, err error) {
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "-G", "--", host)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("%s -G %s: %w: %s", argv[0], host, err, strings.TrimSpace(stderr.String()))
	}
	hostname, port := host, "22"
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "hostname":
			hostname = v
		case "port":
			port = v
		case "user":
			user = v
		}
	}
	return net.JoinHostPort(hostname, port), user, nil
}

// ready waits for the master's control socket, which ssh makes once it has
// logged in: until then, the master's exit is the login's failure.
func (l *systemLink) ready(ctx context.Context, bound time.Duration) error {
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if fi, err := os.Stat(l.sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
		select {
		case <-l.done:
			return fmt.Errorf("login failed: %w", l.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("not logged in within %v (%d × ConnectTimeout)", bound, systemReadyFactor)
		case <-tick.C:
		}
	}
}

func (l *systemLink) newSession() (session, error) {
	select {
	case <-l.done:
		return nil, fmt.Errorf("connection lost: %w", l.err)
	default:
	}
	cmd := exec.Command(l.argv[0], append(l.argv[1:], "-o", "ControlMaster=no", "-o", "ControlPath="+l.sock, "-T", "--", l.host)...)
	cmd.SysProcAttr = systemProcAttr()
	return &systemSession{l: l, cmd: cmd}, nil
}

func (l *systemLink) wait() error {
	<-l.done
	return l.err
}

// close ends the master, and so every session over it; the master
// removes its socket as it ends.
func (l *systemLink) close() error {
	_ = l.master.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.done:
	case <-time.After(2 * time.Second):
		_ = l.master.Process.Kill()
		<-l.done
		_ = os.Remove(l.sock)
	}
	return nil
}

// controlSocket is a fresh name for a master's control socket in this
// user's folder for them, os.TempDir()/gorun-ssh-UID, made 0700 on first
// use and kept: a master removes its socket as it ends, also when gorun is
// killed (it gets SIGTERM then), so nothing is left in it. A folder there
// that is not this user's, or that others may enter, is refused.
func controlSocket() (string, error) {
	dir := filepath.Join(os.TempDir(), "gorun-ssh-"+strconv.Itoa(os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("control socket folder: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("control socket folder: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s must be a folder of yours that no one else may enter (mode 0700): remove it and run again", dir)
	}
	f, err := os.CreateTemp(dir, "s-")
	if err != nil {
		return "", fmt.Errorf("control socket: %w", err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil { // ssh binds the name itself
		return "", fmt.Errorf("control socket: %w", err)
	}
	return name, nil
}

// systemProcAttr: a process group of its own (a terminal's Ctrl-C is
// gorun's to handle), and SIGTERM when gorun dies.
func systemProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// systemSession is one `ssh -S socket` client. Its pipes are plain OS
// pipes rather than exec.Cmd's, so that Wait never closes a reader whose
// data is still to be read (the agent's last frames): each reader closes
// itself at its end, which comes once the client has exited.
type systemSession struct {
	l      *systemLink
	cmd    *exec.Cmd
	stdin  *os.File   // this side's end of the client's stdin, if piped
	ours   []*os.File // this side's ends, closed by Start's failure
	theirs []*os.File // the client's ends, closed once it has started
}

func (s *systemSession) StdinPipe() (io.WriteCloser, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.cmd.Stdin, s.stdin = r, w
	s.ours, s.theirs = append(s.ours, w), append(s.theirs, r)
	return w, nil
}

func (s *systemSession) StdoutPipe() (io.Reader, error) { return s.outPipe(&s.cmd.Stdout) }
func (s *systemSession) StderrPipe() (io.Reader, error) { return s.outPipe(&s.cmd.Stderr) }

func (s *systemSession) outPipe(to *io.Writer) (io.Reader, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	*to = w
	s.ours, s.theirs = append(s.ours, r), append(s.theirs, w)
	return &closingReader{f: r}, nil
}

// Start runs cmd on the node, through the master.
func (s *systemSession) Start(cmd string) error {
	s.cmd.Args = append(s.cmd.Args, cmd)
	err := s.cmd.Start()
	for _, f := range s.theirs {
		f.Close()
	}
	s.theirs = nil
	if err != nil {
		for _, f := range s.ours {
			f.Close()
		}
	}
	return err
}

// Wait is the client's end. ssh's own failures exit 255, as a command can:
// a 255 once the master is gone is the connection lost, not a status.
func (s *systemSession) Wait() error {
	err := s.cmd.Wait()
	if code, ok := exitStatus(err); ok && code == 255 {
		select {
		case <-s.l.done:
			return fmt.Errorf("connection lost: %w", s.l.err)
		case <-time.After(time.Second):
		}
	}
	return err
}

// Close ends the client, which closes its session on the node; its
// outputs then end, and their readers close.
func (s *systemSession) Close() error {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM) // os.ErrProcessDone once waited for
	}
	if s.stdin != nil {
		s.stdin.Close()
	}
	return nil
}

// closingReader closes its file at the end of what it reads (EOF or an
// error): the client that wrote it has exited.
type closingReader struct {
	once sync.Once
	f    *os.File
}

func (c *closingReader) Read(p []byte) (int, error) {
	n, err := c.f.Read(p)
	if err != nil {
		c.once.Do(func() { c.f.Close() })
	}
	return n, err
}

// errNoSSHCommand is an empty --ssh-command.
var errNoSSHCommand = errors.New("--ssh-command is empty: give the ssh client to run, such as ssh or /usr/bin/ssh")
