package job

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/sshexec"
)

func TestChooseTransport(t *testing.T) {
	nodes := []hosts.Host{{Name: "node0"}, {Name: "node1"}}
	found := func(string) (string, error) { return "/usr/bin/srun", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	for _, tc := range []struct {
		name     string
		launcher string
		hostsOpt string
		jobID    string
		look     func(string) (string, error)
		nodes    []hosts.Host
		want     Transport
		wantErr  bool
	}{
		{"auto in an allocation", "auto", "", "7", found, nodes, TransportSrun, false},
		{"auto with --hosts", "auto", "node0,node1", "7", found, nodes, TransportSSH, false},
		{"auto outside an allocation", "auto", "", "", found, nodes, TransportSSH, false},
		{"auto without srun", "auto", "", "7", missing, nodes, TransportSSH, false},
		{"auto, local mode", "auto", "", "7", found, nil, TransportLocal, false},
		{"ssh in an allocation", "ssh", "", "7", found, nodes, TransportSSH, false},
		{"srun with --hosts", "srun", "node0,node1", "7", found, nodes, TransportSrun, false},
		{"srun, local mode", "srun", "", "7", found, nil, TransportLocal, false},
		{"srun outside an allocation", "srun", "", "", found, nodes, 0, true},
		{"srun not on the PATH", "srun", "", "7", missing, nodes, 0, true},
		{"srun not on the PATH, local mode", "srun", "", "7", missing, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{LookPath: tc.look, Getenv: env(map[string]string{"SLURM_JOB_ID": tc.jobID})}
			got, err := chooseTransport(cmdline.Options{Launcher: tc.launcher, Hosts: tc.hostsOpt}, tc.nodes, cfg)
			var input *userr.InputError
			if tc.wantErr != (err != nil) || (err != nil && !errors.As(err, &input)) {
				t.Fatalf("chooseTransport: %v, want an input error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("chooseTransport = %v, want %v", got, tc.want)
			}
		})
	}
	if TransportSrun.String() != "srun" || TransportSSH.String() != "ssh" || TransportLocal.String() != "local" {
		t.Error("Transport.String")
	}
}

func noSlurm() Config {
	return Config{Self: "/bin/true", LookPath: func(string) (string, error) { return "", errors.New("none") },
		Getenv: env(nil)}
}

func TestConnectLocal(t *testing.T) {
	runners, err := Connect(context.Background(), parse(t, "x.py"), nil, noSlurm(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := runners["localhost"].(*sshexec.Local); !ok || len(runners) != 1 {
		t.Errorf("local mode: runners %v", runners)
	}
	// A host list of this machine only needs no ssh.
	runners, err = Connect(context.Background(), parse(t, "--hosts", "localhost:1", "x.py"),
		[]hosts.Host{{Name: "localhost", Slots: 1}}, noSlurm(), nil)
	if err != nil || len(runners) != 1 {
		t.Fatalf("localhost in --hosts: %v, %v", runners, err)
	}
	closeAll(runners)
}

func TestConnectSSHRefused(t *testing.T) {
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts")
	cfgFile := filepath.Join(dir, "ssh_config")
	os.WriteFile(kh, nil, 0o600)
	os.WriteFile(cfgFile, []byte("Host nodea\n  HostName 127.0.0.1\n  Port 1\nHost nodeb\n  HostName 127.0.0.1\n  Port 2\n"), 0o600)
	self, _ := os.Executable()
	cfg := noSlurm()
	cfg.Self = self
	nodes := []hosts.Host{{Name: "nodea"}, {Name: "nodeb"}}

	cl := parse(t, "--ssh-config", cfgFile, "--known-hosts", kh, "--hosts", "nodea,nodeb", "x.py")
	_, err := Connect(context.Background(), cl, nodes, cfg, nil)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("refused ports: %v, want ErrUnreachable", err)
	}
	for _, node := range []string{"nodea", "nodeb"} {
		if !strings.Contains(err.Error(), node) {
			t.Errorf("the error does not name %s: %v", node, err)
		}
	}

	cl = parse(t, "--ssh-config", cfgFile, "--known-hosts", filepath.Join(dir, "missing"), "--hosts", "nodea,nodeb", "x.py")
	if _, err := Connect(context.Background(), cl, nodes, cfg, nil); !errors.Is(err, ErrSSHSettings) {
		t.Errorf("a missing known_hosts: %v, want ErrSSHSettings", err)
	}
}

func TestConnectSrunRemoteGorun(t *testing.T) {
	cl := parse(t, "--launcher", "srun", "--remote-gorun", "/opt/gorun", "x.py")
	cfg := Config{LookPath: func(string) (string, error) { return "/usr/bin/srun", nil },
		Getenv: env(map[string]string{"SLURM_JOB_ID": "7"})}
	nodes := []hosts.Host{{Name: "n1"}, {Name: "n2"}}
	runners, err := Connect(context.Background(), cl, nodes, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range nodes {
		if _, ok := runners[h.Name].(*sshexec.Srun); !ok {
			t.Errorf("%s: %T, want an srun runner", h.Name, runners[h.Name])
		}
	}
}
