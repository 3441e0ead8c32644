package sshexec

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/shell"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sys/unix"
)

// Host key failures. Match them with errors.Is; the concrete error is a
// *HostKeyError with the details.
var (
	// ErrUnknownHost: the host has no key in any known_hosts file.
	ErrUnknownHost = errors.New("unknown host key")
	// ErrHostKeyChanged: known_hosts holds a different key for the host (or
	// the key is revoked). Never accepted.
	ErrHostKeyChanged = errors.New("host key changed")
)

// HostKeyError says which host offered which key and how to proceed.
type HostKeyError struct {
	Host        string // as looked up in known_hosts: "node1" or "[node1]:2222"
	Key         ssh.PublicKey
	Fingerprint string   // SHA256:...
	Files       []string // the known_hosts files consulted
	// Known lists the keys known_hosts holds for the host (file and line);
	// empty for an unknown host.
	Known []knownhosts.KnownKey
	Kind  error // ErrUnknownHost or ErrHostKeyChanged
}

func (e *HostKeyError) Unwrap() error { return e.Kind }

func (e *HostKeyError) Error() string {
	host, port := e.Host, "22"
	if h, p, err := net.SplitHostPort(strings.TrimPrefix(e.Host, "")); err == nil {
		host, port = strings.Trim(h, "[]"), p
	}
	file := "~/.ssh/known_hosts"
	if len(e.Files) > 0 {
		file = e.Files[0]
	}
	if errors.Is(e.Kind, ErrHostKeyChanged) {
		var was []string
		for _, k := range e.Known {
			was = append(was, fmt.Sprintf("%s:%d holds %s %s", k.Filename, k.Line, k.Key.Type(), ssh.FingerprintSHA256(k.Key)))
		}
		return fmt.Sprintf("HOST KEY CHANGED for %s: it offered %s %s but %s; someone may be intercepting the connection, or the host was reinstalled. "+
			"If the change is expected, remove the old key (ssh-keygen -R %s -f %s) and connect again",
			e.Host, e.Key.Type(), e.Fingerprint, strings.Join(was, "; "), shell.Quote(e.Host), shell.Quote(e.Known[0].Filename))
	}
	return fmt.Sprintf("unknown host key for %s: %s %s is not in %s. "+
		"Check the fingerprint, then add it (ssh-keyscan -p %s -t %s %s >> %s) or run again with --ssh-accept-new",
		e.Host, e.Key.Type(), e.Fingerprint, strings.Join(e.Files, ", "),
		port, strings.TrimPrefix(e.Key.Type(), "ssh-"), shell.Quote(host), shell.Quote(file))
}

// hostKeys verifies host keys against known_hosts files, the way OpenSSH
// does with StrictHostKeyChecking yes (or accept-new).
type hostKeys struct {
	userFiles   []string // UserKnownHostsFile; accept-new appends to the first
	globalFiles []string // GlobalKnownHostsFile; read only
	acceptNew   bool
	hash        bool // HashKnownHosts: write hashed host names
}

// maxKnownHosts bounds one known_hosts file: far above the largest real
// one (a shared ssh_known_hosts of thousands of nodes, three keys each, is
// a few MiB), far below what would hurt.
const maxKnownHosts = 32 << 20

// db reads the files that exist now (so keys written by a concurrent
// accept-new are seen) into a knownhosts callback, and lists them. Each is
// read through inputfile (bounded; a FIFO or device refused, not waited on)
// and handed to knownhosts, which reads only by name, as an in-memory file;
// the callback's errors name the real files.
func (h *hostKeys) db() (ssh.HostKeyCallback, []string, error) {
	var files, mem []string
	real := map[string]string{}
	for _, f := range append(append([]string{}, h.userFiles...), h.globalFiles...) {
		b, err := readFile(f, maxKnownHosts)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && len(b) == 0) {
			continue // nothing known there
		}
		if err != nil {
			return nil, nil, fmt.Errorf("known_hosts: %w", err)
		}
		m, err := memFile(f, b)
		if err != nil {
			return nil, nil, fmt.Errorf("known_hosts %s: %w", f, err)
		}
		defer m.Close()
		name := "/proc/self/fd/" + strconv.Itoa(int(m.Fd()))
		files, mem = append(files, f), append(mem, name)
		real[name] = f
	}
	cb, err := knownhosts.New(mem...)
	if err != nil {
		msg := err.Error()
		for name, f := range real {
			msg = strings.ReplaceAll(msg, name+":", f+":")
		}
		return nil, nil, fmt.Errorf("known_hosts: %s", msg)
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			for i := range ke.Want {
				ke.Want[i].Filename = real[ke.Want[i].Filename]
			}
		}
		var re *knownhosts.RevokedError
		if errors.As(err, &re) {
			re.Revoked.Filename = real[re.Revoked.Filename]
		}
		return err
	}, files, nil
}

// memFile returns an in-memory file (memfd) holding b.
func memFile(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(filepath.Base(name), unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// algorithms returns the host key algorithms to offer for hostport: those
// of the keys known_hosts holds for it, so the server cannot pick a type we
// have no record of and look "changed". nil (library default) when none.
func (h *hostKeys) algorithms(hostport string) ([]string, error) {
	cb, _, err := h.db()
	if err != nil {
		return nil, err
	}
	// A key no host has: the lookup fails and lists what is known.
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		return nil, err
	}
	var ke *knownhosts.KeyError
	if err := cb(hostport, probeAddr(hostport), probe); !errors.As(err, &ke) {
		return nil, nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, x := range a {
			if !seen[x] {
				seen[x] = true
				algos = append(algos, x)
			}
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return algos, nil
}

// callback returns the HostKeyCallback for one connection. hostport is the
// name the key is recorded under (HostKeyAlias or HostName, with the port).
func (h *hostKeys) callback(hostport string) ssh.HostKeyCallback {
	return func(_ string, remote net.Addr, key ssh.PublicKey) error {
		cb, files, err := h.db()
		if err != nil {
			return err
		}
		err = cb(hostport, remote, key)
		if err == nil {
			return nil
		}
		herr := &HostKeyError{
			Host:        knownhosts.Normalize(hostport),
			Key:         key,
			Fingerprint: ssh.FingerprintSHA256(key),
			Files:       h.userFiles,
		}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &re):
			herr.Kind = ErrHostKeyChanged
			herr.Known = []knownhosts.KnownKey{re.Revoked}
			return fmt.Errorf("%w (the key is marked @revoked)", herr)
		case errors.As(err, &ke) && len(ke.Want) > 0:
			herr.Kind = ErrHostKeyChanged
			herr.Known = ke.Want
			return herr
		case errors.As(err, &ke):
			herr.Kind = ErrUnknownHost
			if len(files) > 0 {
				herr.Files = files
			}
			if !h.acceptNew {
				return herr
			}
			if err := h.record(hostport, key); err != nil {
				return fmt.Errorf("%w; recording it (accept-new) failed: %w", herr, err)
			}
			return nil
		default:
			return fmt.Errorf("known_hosts: %w", err)
		}
	}
}

// record appends key for hostport to the first user known_hosts file, as
// OpenSSH's accept-new does: "host" or "[host]:port", hashed when
// HashKnownHosts is set. The write is one append under an flock, so
// concurrent dials (and other gorun processes) do not interleave lines.
// The file is opened without blocking and must be a regular file.
func (h *hostKeys) record(hostport string, key ssh.PublicKey) error {
	if len(h.userFiles) == 0 {
		return errors.New("no known_hosts file to write")
	}
	file := h.userFiles[0]
	if file == os.DevNull {
		return fmt.Errorf("known_hosts is %s, where no key can be recorded: give --known-hosts a file", os.DevNull)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND|os.O_CREATE|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", file)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", file, err)
	}
	name := knownhosts.Normalize(hostport)
	if h.hash {
		name = knownhosts.HashHostname(name)
	}
	line := name + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	// Start on a fresh line even if the file lacks a final newline (its
	// size is read again under the lock).
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// probeAddr makes a net.Addr for a lookup made before any connection exists.
func probeAddr(hostport string) net.Addr {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return &net.TCPAddr{Port: 22}
	}
	p, _ := strconv.Atoi(port)
	return &net.TCPAddr{IP: net.ParseIP(host), Port: p}
}
