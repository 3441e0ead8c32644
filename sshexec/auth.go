package sshexec

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
)

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
