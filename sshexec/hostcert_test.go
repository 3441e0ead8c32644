package sshexec

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestDialHostCertificate: a server whose host key is signed by a CA that
// known_hosts trusts (@cert-authority) is reached with no line of its own
// key; one signed by another CA, for another name, or by a revoked CA
// (@revoked) is refused as unknown or changed, never accepted.
func TestDialHostCertificate(t *testing.T) {
	home := isolate(t)
	ca, _ := newTestKey(t)
	other, _ := newTestKey(t)
	hostKey, _ := newTestKey(t)
	sign := func(by ssh.Signer, principals ...string) ssh.Signer {
		cert := &ssh.Certificate{Key: hostKey.PublicKey(), CertType: ssh.HostCert, KeyId: "node",
			ValidPrincipals: principals, ValidBefore: ssh.CertTimeInfinity}
		if err := cert.SignCert(rand.Reader, by); err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewCertSigner(cert, hostKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		signer ssh.Signer
		kh     string
		ok     bool
	}{
		{"signed by the trusted CA", sign(ca, "127.0.0.1"), "@cert-authority", true},
		{"signed by another CA", sign(other, "127.0.0.1"), "@cert-authority", false},
		{"for another name", sign(ca, "node9"), "@cert-authority", false},
		{"the CA revoked", sign(ca, "127.0.0.1"), "@revoked", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := testSSHServer(t, tc.signer)
			// The port is not 22: the pattern names it, as OpenSSH's
			// "[host]:port" does (x/crypto's "*" stands for port 22 only).
			pattern := fmt.Sprintf("[127.0.0.1]:%d", port)
			line := "@cert-authority " + pattern + " " + string(ssh.MarshalAuthorizedKey(ca.PublicKey()))
			if tc.kh == "@revoked" {
				line += "@revoked " + pattern + " " + string(ssh.MarshalAuthorizedKey(ca.PublicKey()))
			}
			kh := writeFile(t, filepath.Join(home, tc.name+".kh"), line, 0o600)
			r, err := Dial(context.Background(), "127.0.0.1", Config{SSHConfigFile: os.DevNull, KnownHosts: kh, Port: port, User: "u"})
			if tc.ok {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				r.Close()
				return
			}
			if err == nil {
				r.Close()
				t.Fatalf("dial succeeded, want the host key refused")
			}
			t.Logf("refused: %v", fmt.Sprint(err))
		})
	}
}
