package sshexec

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

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
	hash        bool        // HashKnownHosts: write hashed host names
	known       *knownHosts // the fan-out's files, read once; nil: h's own

	once sync.Once
}

// maxKnownHosts bounds one known_hosts file: far above the largest real
// one (a shared ssh_known_hosts of thousands of nodes, three keys each, is
// a few MiB), far below what would hurt.
const maxKnownHosts = 32 << 20

// set returns the known_hosts files h reads from: the fan-out's shared
// set, or (a hostKeys made on its own, as in tests) one of its own.
func (h *hostKeys) set() *knownHosts {
	h.once.Do(func() {
		if h.known == nil {
			h.known = newKnownHosts()
		}
	})
	return h.known
}

// db returns a knownhosts callback for hostport over h's files, and the
// files that hold entries.
func (h *hostKeys) db(hostport string) (ssh.HostKeyCallback, []string, error) {
	return h.set().db(append(append([]string{}, h.userFiles...), h.globalFiles...), hostport)
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
	cb, _, err := h.db(hostport)
	if err != nil {
		return nil, err
	}
	// A key no host has: the lookup fails and lists what is known.
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		return nil, err
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
	if h.set().authorities(append(append([]string{}, h.userFiles...), h.globalFiles...), hostport) {
		// A CA is trusted for the host: its certificate first, whatever
		// its key's type (the CA line's own type says nothing of it).
		add(ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01,
			ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01)
	}
	var ke *knownhosts.KeyError
	if err := cb(hostport, probeAddr(hostport), probe); !errors.As(err, &ke) {
		if len(algos) > 0 {
			return algos, nil
		}
		return nil, nil
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
		err := h.verify(hostport, remote, key)
		var herr *HostKeyError
		if !h.acceptNew || !errors.As(err, &herr) || herr.Kind != ErrUnknownHost {
			return err
		}
		return h.record(hostport, key)
	}
}

// verify checks key against what the files hold for hostport: nil when
// known, else a *HostKeyError (possibly wrapped) or a known_hosts error.
func (h *hostKeys) verify(hostport string, remote net.Addr, key ssh.PublicKey) error {
	cb, files, err := h.db(hostport)
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
		return herr
	default:
		return fmt.Errorf("known_hosts: %w", err)
	}
}

// record appends key for hostport to the first user known_hosts file, as
// OpenSSH's accept-new does: "host" or "[host]:port", hashed when
// HashKnownHosts is set. The write is one append under an flock, so
// concurrent dials (and other gorun processes) do not interleave lines.
// The file is opened without blocking and must be a regular file.
//
// Under the lock the host is checked again: against the file as it is
// now when it changed since it was read (another process may have
// recorded a key for it), and against what this fan-out recorded
// meanwhile. A key found then is the verdict: the same key is accepted
// without a second line, a different one refused as changed.
func (h *hostKeys) record(hostport string, key ssh.PublicKey) error {
	unknown := h.verify(hostport, probeAddr(hostport), key)
	fail := func(err error) error {
		return fmt.Errorf("%w; recording it (accept-new) failed: %w", unknown, err)
	}
	if len(h.userFiles) == 0 {
		return fail(errors.New("no known_hosts file to write"))
	}
	file := h.userFiles[0]
	if file == os.DevNull {
		return fail(fmt.Errorf("known_hosts is %s, where no key can be recorded: give --known-hosts a file", os.DevNull))
	}
	set := h.set()
	set.rec.Lock() // one record at a time in this process; flock for the others
	defer set.rec.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fail(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND|os.O_CREATE|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !st.Mode().IsRegular() {
		return fail(fmt.Errorf("%s is not a regular file", file))
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fail(fmt.Errorf("lock %s: %w", file, err))
	}
	// Its size again, under the lock.
	if st, err = f.Stat(); err != nil {
		return fail(err)
	}
	set.refresh(file, st.Size())
	err = h.verify(hostport, probeAddr(hostport), key)
	var herr *HostKeyError
	if !errors.As(err, &herr) || herr.Kind != ErrUnknownHost {
		return err // recorded meanwhile: nil for the same key
	}
	unknown = err
	name := knownhosts.Normalize(hostport)
	if h.hash {
		name = knownhosts.HashHostname(name)
	}
	line := name + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	// Start on a fresh line even if the file lacks a final newline.
	if st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		return fail(fmt.Errorf("write %s: %w", file, err))
	}
	set.appended(file, []byte(line+"\n"))
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
