package sshexec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/gorun/gorun/internal/inputfile"
	"github.com/gorun/gorun/internal/shell"
	"golang.org/x/crypto/ssh"
)

// auth holds the keys offered for one login.
type auth struct {
	ctx     context.Context // the dial's: bounds each wait on the agent
	keys    []ssh.Signer
	agent   *agentConn      // nil when there is none
	owned   bool            // agent is this login's own, closed with it
	only    bool            // IdentitiesOnly: agent keys only if they match a file
	allowed map[string]bool // public keys of the identity files (for IdentitiesOnly)
	tried   []string

	once sync.Once
	list []ssh.Signer
}

// defaultIdentities are OpenSSH's default identity files, in its order.
var defaultIdentities = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// newAuth loads the identity files and connects to ssh-agent (SSH_AUTH_SOCK).
//
// The first file, when explicitFirst (--ssh-identity), must be usable: a
// missing or unreadable file, one with permissions OpenSSH refuses, or a
// passphrase-protected key that no reachable ssh-agent holds is an error
// saying how to fix it, before any connection. The other files (ssh_config's
// IdentityFile, else ~/.ssh/id_*) are skipped when missing, as ssh does;
// skipped with a warning when ssh would refuse them (permissions, not a
// regular file, not a key); and skipped quietly when passphrase-protected
// with no agent holding them. Skipped files are listed in a refused
// login's error.
func newAuth(ctx context.Context, s hostSettings, explicitFirst bool, warn func(string)) (*auth, error) {
	return newAuthFrom(ctx, s, explicitFirst, warn, nil)
}

// newAuthFrom is newAuth with the fan-out's shared inputs: the identity
// files read once and one agent connection for every dial. With nil, it
// reads the files and connects to the agent for this login alone.
func newAuthFrom(ctx context.Context, s hostSettings, explicitFirst bool, warn func(string), in *inputs) (*auth, error) {
	a := &auth{ctx: ctx, only: s.IdentitiesOnly, allowed: map[string]bool{}}
	files := s.IdentityFiles
	if len(files) == 0 {
		home := homeDir()
		if in != nil {
			home = in.home
		}
		for _, f := range defaultIdentities {
			files = append(files, home+"/.ssh/"+f)
		}
	}
	read := readIdentity
	ag := newAgentConn(ctx)
	if in != nil {
		read, ag = in.identity, in.agent
	} else {
		a.owned = true
	}
	// The agent first: whether it is there decides what an encrypted key means.
	noAgent := ag.connect(ctx)
	if noAgent == "" {
		a.agent = ag
	} else if a.owned {
		ag.close()
	}
	for i, f := range files {
		explicit := i == 0 && explicitFirst
		id, err := read(f)
		if err != nil {
			switch {
			case explicit:
				a.close()
				return nil, fmt.Errorf("--ssh-identity: %w", err)
			case errors.Is(err, fs.ErrNotExist):
			default:
				warn(fmt.Sprintf("identity file skipped: %v", err))
				a.tried = append(a.tried, fmt.Sprintf("%s (refused: %v)", f, err))
			}
			continue
		}
		if id.signer != nil {
			a.keys = append(a.keys, id.signer)
			a.allowed[string(id.signer.PublicKey().Marshal())] = true
			a.tried = append(a.tried, fmt.Sprintf("%s (%s)", f, ssh.FingerprintSHA256(id.signer.PublicKey())))
			continue
		}
		// Passphrase-protected: usable only through the agent.
		if id.pub != nil {
			a.allowed[string(id.pub.Marshal())] = true
		}
		var unusable error
		switch {
		case noAgent != "":
			unusable = fmt.Errorf("%s is passphrase-protected, gorun cannot ask for a passphrase, and %s: start an agent and load the key (eval \"$(ssh-agent)\"; ssh-add %s)",
				f, noAgent, shell.Quote(f))
		case id.pub != nil && !a.agentHolds(id.pub):
			unusable = fmt.Errorf("%s is passphrase-protected, gorun cannot ask for a passphrase, and ssh-agent does not hold it: load it (ssh-add %s)",
				f, shell.Quote(f))
		}
		if unusable != nil {
			if explicit {
				a.close()
				return nil, fmt.Errorf("--ssh-identity: %w", unusable)
			}
			// No warning: another key may well log in (ssh in batch mode
			// skips it as quietly); a refused login lists it.
			a.tried = append(a.tried, f+" (passphrase-protected, not in ssh-agent)")
			continue
		}
		a.tried = append(a.tried, f+" (passphrase: through ssh-agent)")
	}
	return a, nil
}

// agentHolds reports whether the agent offers pub (true when it cannot
// tell, so a flaky agent does not turn into a false "not loaded").
func (a *auth) agentHolds(pub ssh.PublicKey) bool {
	keys, err := a.agent.list(a.ctx)
	if err != nil {
		return true
	}
	want := string(pub.Marshal())
	for _, k := range keys {
		if string(k.Marshal()) == want {
			return true
		}
	}
	return false
}

// identity is one identity file, read: signer when it is not encrypted,
// else pub when its public half is known (OpenSSH's format stores it in the
// clear; otherwise the .pub beside it).
type identity struct {
	signer ssh.Signer
	pub    ssh.PublicKey
}

// readIdentity reads and parses a private key file through inputfile (a
// FIFO or device named by mistake is refused, not waited on), refusing,
// as OpenSSH does, a key of this user that group or others may access.
func readIdentity(path string) (identity, error) {
	b, st, err := inputfile.ReadInfo(path, inputfile.DefaultMax)
	if err != nil {
		return identity{}, err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 && ownedBySelf(st) {
		return identity{}, fmt.Errorf("permissions %04o for %s are too open: ssh refuses a private key that others can access; run chmod 600 %s",
			perm, path, shell.Quote(path))
	}
	signer, err := ssh.ParsePrivateKey(b)
	var pm *ssh.PassphraseMissingError
	switch {
	case err == nil:
		return identity{signer: signer}, nil
	case errors.As(err, &pm):
		id := identity{pub: pm.PublicKey}
		if id.pub == nil {
			if pub, err := inputfile.Read(path+".pub", inputfile.DefaultMax); err == nil {
				if k, _, _, _, err := ssh.ParseAuthorizedKey(pub); err == nil {
					id.pub = k
				}
			}
		}
		return id, nil
	default:
		return identity{}, fmt.Errorf("%s: not a private key: %w", path, err)
	}
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
		ks, err := a.agent.signerList(a.ctx)
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

// close ends the login's own agent connection; a shared one is the
// fan-out's to close.
func (a *auth) close() {
	if a.owned && a.agent != nil {
		a.agent.close()
	}
}

// ownedBySelf reports whether this process's user owns the file, the case
// in which OpenSSH checks a key's permissions.
func ownedBySelf(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Getuid()
}
