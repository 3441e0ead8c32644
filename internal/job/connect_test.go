package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/sshexec"
	"github.com/hashicorp/go-multierror"
)

func TestChooseTransport(t *testing.T) {
	nodes := []hosts.Host{{Name: "node0"}, {Name: "node1"}}
	found := func(string) (string, error) { return "/usr/bin/srun", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	alloc := map[string]string{"SLURM_JOB_ID": "7"}
	step := map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "PET_NNODES": "2"}
	// What Kubeflow's PyTorchJob and Trainer v2 set in every pod.
	pod := func(rank string) map[string]string {
		return map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": rank, "PET_NPROC_PER_NODE": "2",
			"PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29500"}
	}
	for _, tc := range []struct {
		name    string
		args    []string // before the script
		env     map[string]string
		look    func(string) (string, error)
		nodes   []hosts.Host
		want    Transport
		wantErr bool
	}{
		{"auto in an allocation", nil, alloc, found, nodes, TransportSrun, false},
		{"auto with --hosts", []string{"--hosts", "node0,node1"}, alloc, found, nodes, TransportSSH, false},
		{"auto outside an allocation", nil, nil, found, nodes, TransportSSH, false},
		{"auto without srun", nil, alloc, missing, nodes, TransportSSH, false},
		{"auto, local mode", nil, alloc, found, nil, TransportLocal, false},
		{"ssh in an allocation", []string{"--launcher", "ssh"}, alloc, found, nodes, TransportSSH, false},
		{"srun with --hosts", []string{"--launcher", "srun", "--hosts", "node0,node1"}, alloc, found, nodes, TransportSrun, false},
		{"srun, local mode", []string{"--launcher", "srun"}, alloc, found, nil, TransportLocal, false},
		{"srun outside an allocation", []string{"--launcher", "srun"}, nil, found, nodes, 0, true},
		{"srun not on the PATH", []string{"--launcher", "srun"}, alloc, missing, nodes, 0, true},
		{"srun not on the PATH, local mode", []string{"--launcher", "srun"}, alloc, missing, nil, 0, true},

		{"pod: Kubeflow's PET_* on node 0", nil, pod("0"), missing, nil, TransportPod, false},
		{"pod: Kubeflow's PET_* on node 1", nil, pod("1"), missing, nil, TransportPod, false},
		{"pod: PET_NODE_RANK alone", nil, map[string]string{"PET_NODE_RANK": "0"}, missing, nil, TransportPod, false},
		{"pod: PET_NNODES=1:3, elastic", nil, map[string]string{"PET_NNODES": "1:3"}, missing, nil, TransportPod, false},
		{"pod: --nnodes and --node-rank on argv", []string{"--nnodes", "2", "--node-rank", "1"}, nil, missing, nil, TransportPod, false},
		{"pod: c10d", []string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "job-0:29400"}, map[string]string{"PET_NNODES": "2"}, missing, nil, TransportPod, false},
		{"pod: --launcher ssh with no host list", []string{"--launcher", "ssh"}, pod("1"), missing, nil, TransportPod, false},
		{"pod: srun on the PATH, no allocation", nil, pod("1"), found, nil, TransportPod, false},
		{"local: PET_NNODES=1", nil, map[string]string{"PET_NNODES": "1"}, missing, nil, TransportLocal, false},
		{"local: --standalone", []string{"--standalone"}, nil, missing, nil, TransportLocal, false},
		{"local: PET_NNODES=2 in a Slurm step (srun gorun)", nil, step, found, nil, TransportLocal, false},
		{"ssh: PET_NNODES=2 with --hosts", []string{"--hosts", "node0,node1"}, pod("0"), missing, nodes, TransportSSH, false},
		{"srun: PET_NNODES=2 in an allocation's batch script", nil, map[string]string{"SLURM_JOB_ID": "7", "PET_NNODES": "2"}, found, nodes, TransportSrun, false},
		{"refused: --launcher srun in a pod", []string{"--launcher", "srun"}, pod("1"), found, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := cmdline.Parse(append(append([]string{}, tc.args...), "x.py"), env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{LookPath: tc.look, Getenv: env(tc.env)}
			got, err := chooseTransport(cl, tc.nodes, cfg)
			var input *userr.InputError
			if tc.wantErr != (err != nil) || (err != nil && !errors.As(err, &input)) {
				t.Fatalf("chooseTransport: %v, want an input error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("chooseTransport = %v, want %v", got, tc.want)
			}
		})
	}
	for tr, name := range map[Transport]string{TransportSrun: "srun", TransportSSH: "ssh", TransportLocal: "local", TransportPod: "pod"} {
		if tr.String() != name {
			t.Errorf("Transport.String() = %q, want %q", tr.String(), name)
		}
	}
}

func noSlurm() Config {
	return Config{Self: "/bin/true", LookPath: func(string) (string, error) { return "", errors.New("none") },
		Getenv: env(nil)}
}

func TestConnectLocal(t *testing.T) {
	runners, err := Connect(context.Background(), parse(t, "x.py"), nil, noSlurm(), UI{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := runners["localhost"].(*sshexec.Local); !ok || len(runners) != 1 {
		t.Errorf("local mode: runners %v", runners)
	}
	// A host list of this machine only needs no ssh.
	runners, err = Connect(context.Background(), parse(t, "--hosts", "localhost:1", "x.py"),
		[]hosts.Host{{Name: "localhost", Slots: 1}}, noSlurm(), UI{})
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
	_, err := Connect(context.Background(), cl, nodes, cfg, UI{})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("refused ports: %v, want ErrUnreachable", err)
	}
	for _, node := range []string{"nodea", "nodeb"} {
		if !strings.Contains(err.Error(), node) {
			t.Errorf("the error does not name %s: %v", node, err)
		}
	}

	cl = parse(t, "--ssh-config", cfgFile, "--known-hosts", filepath.Join(dir, "missing"), "--hosts", "nodea,nodeb", "x.py")
	if _, err := Connect(context.Background(), cl, nodes, cfg, UI{}); !errors.Is(err, ErrSSHSettings) {
		t.Errorf("a missing known_hosts: %v, want ErrSSHSettings", err)
	}
}

func TestConnectSrunRemoteGorun(t *testing.T) {
	cl := parse(t, "--launcher", "srun", "--remote-gorun", "/opt/gorun", "x.py")
	cfg := Config{LookPath: func(string) (string, error) { return "/usr/bin/srun", nil },
		Getenv: env(map[string]string{"SLURM_JOB_ID": "7"})}
	nodes := []hosts.Host{{Name: "n1"}, {Name: "n2"}}
	runners, err := Connect(context.Background(), cl, nodes, cfg, UI{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range nodes {
		if _, ok := runners[h.Name].(*sshexec.Srun); !ok {
			t.Errorf("%s: %T, want an srun runner", h.Name, runners[h.Name])
		}
	}
}

// TestCheckFileLimit: a node count whose connections would not fit under
// RLIMIT_NOFILE is refused, saying how many files it needs and how to
// raise the limit; an unknown limit refuses nothing.
func TestCheckFileLimit(t *testing.T) {
	if err := checkFileLimit(4000, 1, "over SSH", "one connection each", 4096); err != nil {
		t.Errorf("4000 nodes under 4096 files: %v", err)
	}
	err := checkFileLimit(4096, 1, "over SSH", "one connection each", 4096)
	var ie *userr.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "4096 nodes over SSH need about 4160 open files") || !strings.Contains(err.Error(), "ulimit -n 4160") {
		t.Errorf("4096 nodes under 4096 files: %v", err)
	}
	if err := checkFileLimit(2000, 3, "through srun", "3 pipes each", 4096); err == nil || !strings.Contains(err.Error(), "6064 open files") {
		t.Errorf("2000 srun nodes: %v", err)
	}
	if err := checkFileLimit(1<<20, 1, "over SSH", "", 0); err != nil {
		t.Errorf("unknown limit: %v", err)
	}
}

// TestUnreachedHosts: the nodes a failed dial names, however the error
// wraps them.
func TestUnreachedHosts(t *testing.T) {
	var merr *multierror.Error
	merr = multierror.Append(merr, &sshexec.HostError{Host: "node7", Err: errors.New("no route")},
		&sshexec.HostError{Host: "node3", Err: errors.New("refused")})
	err := fmt.Errorf("%w:\n%w", ErrUnreachable, merr)
	if got := unreachedHosts(err); !slices.Equal(got, []string{"node3", "node7"}) {
		t.Errorf("unreachedHosts = %q, want node3 node7", got)
	}
	if got := unreachedHosts(errors.New("other")); len(got) != 0 {
		t.Errorf("unreachedHosts of an error naming no node = %q", got)
	}
}
