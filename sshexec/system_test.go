package sshexec

import (
	"strings"
	"testing"
	"time"
)

// TestSystemArgv: gorun's flags become ssh's own options, and gorun's
// safety options come after the user's, on the command line, where
// ssh_config cannot undo them; the hint to try a login by hand repeats
// none of --ssh-command's options (one may hold a secret).
func TestSystemArgv(t *testing.T) {
	cfg := Config{SSHCommand: []string{"sshpass", "-p", "hunter2", "ssh"}, SSHConfigFile: "cfg", User: "u", Port: 2222,
		Identity: "id", KnownHosts: "kh", AcceptNew: true, KeepaliveInterval: 5 * time.Second, KeepaliveMax: 4, ConnectTimeout: 7 * time.Second}
	got := strings.Join(systemArgv(cfg), " ")
	want := "sshpass -p hunter2 ssh -F cfg -l u -p 2222 -i id -o UserKnownHostsFile=kh -o BatchMode=yes -o StrictHostKeyChecking=accept-new " +
		"-o ServerAliveInterval=5 -o ServerAliveCountMax=4 -o ConnectTimeout=7"
	if got != want {
		t.Errorf("argv\n got %s\nwant %s", got, want)
	}
	if got := strings.Join(systemArgv(Config{SSHCommand: []string{"ssh"}}), " "); got != "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ServerAliveInterval=3 -o ServerAliveCountMax=3" {
		t.Errorf("the defaults: %s", got)
	}
	hint := loginHint(cfg, systemArgv(cfg), "node1")
	if strings.Contains(hint, "hunter2") || !strings.HasPrefix(hint, "sshpass [--ssh-command's options] -F cfg") || !strings.HasSuffix(hint, " node1 true") {
		t.Errorf("hint %q", hint)
	}
}
