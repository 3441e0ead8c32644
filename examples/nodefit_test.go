package examples

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/sshexec"
)

// nodeEnv makes node i's sshd give every session env (sshd_config
// SetEnv), reloading it, and restores it when t ends.
func nodeEnv(t *testing.T, c cluster, i int, env ...string) {
	t.Helper()
	conf := filepath.Join(c.state, c.nodes[i], "sshd_config")
	orig, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	reload := func() { reloadSSHD(t, c, i) }
	if err := os.WriteFile(conf, append(bytes.Clone(orig), []byte("SetEnv "+strings.Join(env, " ")+"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	reload()
	t.Cleanup(func() {
		if err := os.WriteFile(conf, orig, 0o644); err != nil {
			t.Error(err)
		}
		reload()
	})
}

// reloadSSHD has node i's sshd read its sshd_config again (SIGHUP to its
// listener, found by its command line: the pid file holds its pid in the
// node's own PID namespace), and waits for it to listen again.
func reloadSSHD(t *testing.T, c cluster, i int) {
	t.Helper()
	conf := filepath.Join(c.state, c.nodes[i], "sshd_config")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte(conf)) || !bytes.Contains(cmd, []byte("[listener]")) {
			continue
		}
		var pid int
		for _, ch := range e.Name() {
			pid = pid*10 + int(ch-'0')
		}
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // sshd re-executes itself
		return
	}
	t.Fatalf("no sshd listener of %s", conf)
}

// fakeBin is a folder with executables named by names, each printing its
// text, first on PATH for a node that should seem other than it is.
func fakeBin(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+text+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestNodeFit: the head checks each node's architecture and glibc before
// it uploads gorun there. A node whose glibc is older than this gorun
// needs is refused in preflight with one line (its architecture and
// glibc, the fix): exit 2, nothing started. A node of another
// architecture (uname -m says aarch64) gets the build for it found beside
// the head's gorun (gorun-linux-arm64), not the head's own.
func TestNodeFit(t *testing.T) {
	c := needCluster(t, 2)
	t.Run("old glibc", func(t *testing.T) {
		cache := t.TempDir()
		nodeEnv(t, c, 1, "XDG_CACHE_HOME="+cache, "PATH="+fakeBin(t, map[string]string{"getconf": "echo glibc 2.17"})+":/usr/local/bin:/usr/bin:/bin")
		mark := marker(t)
		r := startGorun(t, []string{"GORUN_MARK=" + mark}, append(c.sshArgs(), "--hosts", c.hostsFlag(1), "--torchrun", shim(t), script(t), "--tag", mark)...)
		code := r.wait(t, 2*time.Minute)
		out := r.output()
		if code != 2 || !strings.Contains(out, "gorun.fit") || !strings.Contains(out, "node "+c.nodes[1]+" is x86_64 with glibc 2.17") {
			t.Errorf("exit %d, want 2 with node1's line:\n%s", code, out)
		}
		if ents, _ := os.ReadDir(filepath.Join(cache, "gorun")); len(ents) != 0 {
			t.Errorf("something was uploaded to the node refused: %v", ents)
		}
		noneLeft(t, mark, 10*time.Second)
	})
	t.Run("another architecture", func(t *testing.T) {
		// The head: this gorun, and beside it an arm64 build (a stub: any
		// aarch64 ELF tells which file is uploaded).
		head := t.TempDir()
		self := filepath.Join(head, "gorun")
		b, err := os.ReadFile(gorunBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(self, b, 0o755); err != nil {
			t.Fatal(err)
		}
		stubSrc := filepath.Join(t.TempDir(), "main.go")
		if err := os.WriteFile(stubSrc, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		stub := filepath.Join(head, "gorun-linux-arm64")
		build := exec.Command("go", "build", "-o", stub, stubSrc)
		build.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0", "GOOS=linux")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build the arm64 stub: %v\n%s", err, out)
		}
		arm, err := sshexec.HashBinary(stub)
		if err != nil || arm.Arch != "arm64" {
			t.Fatalf("the stub: %+v, %v", arm, err)
		}
		cache := t.TempDir()
		nodeEnv(t, c, 1, "XDG_CACHE_HOME="+cache, "PATH="+fakeBin(t, map[string]string{"uname": `[ "$1" = -m ] && echo aarch64 || exec /usr/bin/uname "$@"`})+":/usr/local/bin:/usr/bin:/bin")
		mark := marker(t)
		r := startCmd(t, exec.Command(self, append(c.sshArgs(), "--hosts", c.hostsFlag(1), "--torchrun", shim(t), script(t), "--tag", mark)...),
			[]string{"GORUN_MARK=" + mark})
		code := r.wait(t, 2*time.Minute)
		got, err := os.ReadFile(filepath.Join(cache, "gorun", arm.Name))
		want, _ := os.ReadFile(stub)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("node1 (aarch64 by uname) did not get the arm64 build (%s): %v; gorun exit %d:\n%s", arm.Name, err, code, r.output())
		}
		if code == 0 {
			t.Errorf("the stub cannot be an agent, yet the run succeeded:\n%s", r.output())
		}
		noneLeft(t, mark, 10*time.Second)
	})
}

// TestClusterHostCertificate: a node whose real sshd presents a host
// certificate signed by a CA is reached with a known_hosts that holds
// only "@cert-authority * CA" (no line of the node's own key); with
// another CA there it is refused as unknown, nothing started. Both by
// gorun's own client and by the system's (--ssh-command ssh).
func TestClusterHostCertificate(t *testing.T) {
	c := needCluster(t, 2)
	dir := t.TempDir()
	keygen := func(args ...string) {
		if out, err := exec.Command("ssh-keygen", args...).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen %v: %v\n%s", args, err, out)
		}
	}
	for _, ca := range []string{"ca", "other"} {
		keygen("-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, ca))
	}
	hostKey := filepath.Join(c.state, c.nodes[1], "ssh_host_ed25519_key")
	pub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	certPub := filepath.Join(dir, "host.pub")
	if err := os.WriteFile(certPub, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	// Its principals: the name and the address ssh checks it under.
	sshConf, _ := os.ReadFile(filepath.Join(c.state, "ssh_config"))
	addr := regexp.MustCompile(`(?m)^Host ` + regexp.QuoteMeta(c.nodes[1]) + `\n\s*HostName (\S+)`).FindSubmatch(sshConf)
	if addr == nil {
		t.Fatalf("no HostName for %s in the cluster's ssh_config", c.nodes[1])
	}
	keygen("-q", "-s", filepath.Join(dir, "ca"), "-I", c.nodes[1], "-h", "-n", c.nodes[1]+","+string(addr[1]), certPub)
	cert := filepath.Join(dir, "host-cert.pub")
	// The node's sshd presents the certificate as well as its key.
	conf := filepath.Join(c.state, c.nodes[1], "sshd_config")
	orig, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	withCert := append(bytes.Clone(orig), []byte("HostCertificate "+cert+"\n")...)
	if err := os.WriteFile(conf, withCert, 0o644); err != nil {
		t.Fatal(err)
	}
	hup := func() { reloadSSHD(t, c, 1) }
	hup()
	t.Cleanup(func() { os.WriteFile(conf, orig, 0o644); hup() })
	// Over both clients: the system's ssh reads the same --known-hosts.
	c.eachClient(t, func(t *testing.T, c cluster) {
		for _, tc := range []struct {
			ca   string
			code int
		}{{"ca", 0}, {"other", 2}} {
			capub, _ := os.ReadFile(filepath.Join(dir, tc.ca+".pub"))
			kh := filepath.Join(dir, tc.ca+".known_hosts")
			if err := os.WriteFile(kh, []byte("@cert-authority * "+string(capub)), 0o644); err != nil {
				t.Fatal(err)
			}
			mark := marker(t)
			r := startGorun(t, []string{"GORUN_MARK=" + mark}, append(c.sshArgs(), "--known-hosts", kh, "--hosts", c.nodes[1]+":1",
				"--torchrun", shim(t), "--dry-run", script(t), "--tag", mark)...)
			code := r.wait(t, 2*time.Minute)
			if tc.code == 0 && code != 0 {
				t.Errorf("with the CA that signed the node's certificate: exit %d, want 0:\n%s", code, r.output())
			}
			if tc.code != 0 && (code == 0 || !strings.Contains(r.output(), c.nodes[1])) {
				t.Errorf("with another CA: exit %d, want a refusal naming %s:\n%s", code, c.nodes[1], r.output())
			}
			noneLeft(t, mark, 10*time.Second)
		}
	})
}
