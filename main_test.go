package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests in this file run the real gorun binary, built once by
// TestMain, the way a user runs it: a command line, an environment, a
// working directory. A fake torchrun on the PATH records whether anything
// was started.

var gorunBin string // set once by TestMain, read-only after

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gorun-main-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gorunBin = filepath.Join(dir, "gorun")
	if out, err := exec.Command("go", "build", "-o", gorunBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sandbox is a working directory with a train.py, a fake torchrun that
// leaves a marker when started, and an empty HOME (no ssh config, no
// known_hosts of the user's).
type sandbox struct {
	dir, marker string
	env         []string
	nofile      int // RLIMIT_NOFILE gorun runs under (prlimit); 0: this process's
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	home := filepath.Join(dir, "home")
	for _, d := range []string{bin, filepath.Join(home, ".ssh")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := &sandbox{dir: dir, marker: filepath.Join(dir, "torchrun-started")}
	// Asking its --help (an unknown option: does this torchrun know it?)
	// starts nothing.
	write(t, filepath.Join(bin, "torchrun"), "#!/bin/sh\n[ \"$1\" = --help ] && exit 0\necho started >> "+s.marker+"\n", 0o755)
	write(t, filepath.Join(dir, "train.py"), "print('hi')\n", 0o644)
	s.env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8"}
	return s
}

func write(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// run runs gorun in the sandbox to its end.
func (s *sandbox) run(t *testing.T, env []string, args []string) result {
	t.Helper()
	return s.runInterrupted(t, env, args, nil, nil)
}

// runInterrupted runs gorun in the sandbox and, when sig is set, sends it
// sig as soon as ready is closed: when the test has seen gorun reach the
// phase it interrupts. gorun ending first fails the test; the run's 60 s
// limit bounds the wait.
func (s *sandbox) runInterrupted(t *testing.T, env []string, args []string, sig os.Signal, ready <-chan struct{}) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gorunBin, args...)
	if s.nofile > 0 {
		cmd = exec.CommandContext(ctx, "prlimit", append([]string{fmt.Sprintf("--nofile=%d", s.nofile), gorunBin}, args...)...)
	}
	cmd.Dir = s.dir
	cmd.Env = append(append([]string(nil), s.env...), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever it left, for the next case
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var sent time.Time
	var err error
	if sig != nil {
		select {
		case <-ready:
			sent = time.Now()
			cmd.Process.Signal(sig)
			err = <-exited
		case err = <-exited:
			t.Fatalf("gorun %q ended (%v) before the phase to interrupt\nstderr: %s", args, err, stderr.String())
		}
	} else {
		err = <-exited
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if sig != nil {
		r.took = time.Since(sent)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("gorun %q: %v", args, err)
	}
	return r
}

func (s *sandbox) started() bool {
	_, err := os.Stat(s.marker)
	return err == nil
}

// hostileCase is one bad or hostile input: what gorun must answer.
type hostileCase struct {
	name  string
	setup func(t *testing.T, dir string) // files the input names
	env   []string
	args  []string
	code  int
	// where and fix must both appear in the output (stderr, or stdout for
	// exit 0): the message says where the problem is and how to fix it.
	where, fix string
	// secret must appear nowhere: stdout, stderr or JSON.
	secret string
	// check, when set, asserts more of the result.
	check func(t *testing.T, r result)
	// nofile, when set, is the RLIMIT_NOFILE gorun runs under.
	nofile int
}

const secret = "s3cr3t-Value-42"

func hostileCases() []hostileCase {
	mkfifo := func(name string) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	file := func(name, body string, mode os.FileMode) func(*testing.T, string) {
		return func(t *testing.T, dir string) { write(t, filepath.Join(dir, name), body, mode) }
	}
	long := strings.Repeat("x", 100_000)
	dry := []string{"--dry-run", "--preflight", "off"}
	hosts2 := "--hosts=n1:2,n2:2"
	c := []hostileCase{
		// Files: bounded, regular, never blocking.
		{name: "hostfile is a FIFO", setup: mkfifo("hf"), args: []string{"--hostfile", "hf", "train.py"}, code: 2, where: "--hostfile", fix: "hostfile"},
		{name: "hostfile is /dev/urandom", args: []string{"--hostfile", "/dev/urandom", "train.py"}, code: 2, where: "--hostfile", fix: "hostfile"},
		{name: "hostfile is /dev/zero", args: []string{"--hostfile", "/dev/zero", "train.py"}, code: 2, where: "--hostfile", fix: "hostfile"},
		{name: "hostfile is a directory", args: []string{"--hostfile", ".", "train.py"}, code: 2, where: "--hostfile", fix: "hostfile"},
		{name: "hostfile missing", args: []string{"--hostfile", "nope", "train.py"}, code: 2, where: "--hostfile", fix: "hostfile"},
		{name: "hostfile too large", setup: file("big", strings.Repeat("n1 slots=1\n", 200_000), 0o644), args: []string{"--hostfile", "big", "train.py"}, code: 2, where: "--hostfile", fix: "limit"},
		{name: "hostfile UTF-16", setup: file("u16", "\xff\xfen\x001\x00\n\x00", 0o644), args: []string{"--hostfile", "u16", "train.py"}, code: 2, where: "u16", fix: "UTF-8"},
		{name: "hostfile not UTF-8", setup: file("latin1", "n\xe91 slots=1\n", 0o644), args: []string{"--hostfile", "latin1", "train.py"}, code: 2, where: "latin1:1", fix: "UTF-8"},
		{name: "topo-file is a FIFO", setup: mkfifo("topo"), args: []string{"preflight", "--topo-file", "topo"}, code: 2, where: "--topo-file", fix: "nvidia-smi topo -m"},
		{name: "topo-file is /dev/zero", args: []string{"preflight", "--topo-file", "/dev/zero"}, code: 2, where: "--topo-file", fix: "nvidia-smi topo -m"},
		{name: "topo-file empty name", args: []string{"preflight", "--topo-file", ""}, code: 2, where: "--topo-file", fix: "FILE"},
		{name: "topo-file empty name (= form)", args: []string{"preflight", "--topo-file="}, code: 2, where: "--topo-file", fix: "FILE"},
		{name: "topo-file with --hosts", setup: file("t", "GPU0\tX\n", 0o644), args: []string{"preflight", "--topo-file", "t", "--hosts", "a"}, code: 2, where: "--topo-file", fix: "alone"},
		{name: "bandwidth not node or all", args: []string{"preflight", "--bandwidth", "fast"}, code: 2, where: "--bandwidth", fix: "--bandwidth node"},
		{name: "bandwidth without a value", args: []string{"preflight", "--bandwidth"}, code: 2, where: "--bandwidth", fix: "--bandwidth all"},
		{name: "preflight-bandwidth not a choice", args: []string{"--preflight-bandwidth", "fast", "train.py"}, code: 2, where: "--preflight-bandwidth", fix: "node"},
		{name: "ssh-config is a FIFO", setup: mkfifo("cfg"), args: []string{"--ssh-config", "cfg", hosts2, "train.py"}, code: 2, where: "cfg", fix: "regular file"},
		{name: "known-hosts is a FIFO", setup: mkfifo("kh"), args: []string{"--known-hosts", "kh", hosts2, "train.py"}, code: 2, where: "kh", fix: "regular file"},
		{name: "known-hosts missing", args: []string{"--known-hosts", "nope", hosts2, "train.py"}, code: 2, where: "nope", fix: "known"},
		{name: "identity is a FIFO", setup: mkfifo("id"), args: []string{"--ssh-identity", "id", hosts2, "train.py"}, code: 2, where: "id", fix: "regular file"},
		{name: "identity readable by others", setup: file("id_loose", "-----BEGIN OPENSSH PRIVATE KEY-----\n", 0o644), args: []string{"--ssh-identity", "id_loose", hosts2, "train.py"}, code: 2, where: "id_loose", fix: "chmod 600"},
		{name: "two unreachable nodes, one line each", setup: refusedNodes, args: []string{"--ssh-config", "F", "--known-hosts", "kh", "--hosts", "nodea,nodeb", "--preflight", "off", "x.py"},
			code: 3, where: "cannot reach every node", fix: "refused", check: oneLinePerNode("nodea", "nodeb")},
		{name: "1024 unreachable nodes, a handful of lines", setup: refusedManyNodes(1024), args: []string{"--ssh-config", "F", "--known-hosts", "kh", "--hostfile", "hf", "--preflight", "off", "x.py"},
			code: 3, where: "1024 nodes refused the connection: n[0-1023]", fix: "e.g. node n0: ", check: atMostLines(4)},
		{name: "more nodes than open files", setup: refusedManyNodes(1024), args: []string{"--ssh-config", "F", "--known-hosts", "kh", "--hostfile", "hf", "--preflight", "off", "x.py"},
			nofile: 1000, code: 2, where: "1024 nodes over SSH need about 1088 open files", fix: "ulimit -n 1088", check: atMostLines(1)},

		// Exit codes and usage.
		{name: "hosts with an unknown option", args: []string{"hosts", "--bogus"}, code: 2, where: "gorun hosts", fix: "--hostfile"},
		{name: "version with an unknown option", args: []string{"version", "--bogus"}, code: 2, where: "gorun version", fix: "no options"},
		{name: "help", args: []string{"help"}, code: 0, where: "usage: gorun", fix: "preflight"},
		{name: "help preflight", args: []string{"help", "preflight"}, code: 0, where: "usage: gorun preflight", fix: "--topo-file"},
		{name: "hosts with an argument", args: []string{"hosts", "node1"}, code: 2, where: "gorun hosts", fix: "--help"},
		{name: "hosts with nothing to list", args: []string{"hosts"}, code: 2, where: "nothing to list", fix: "--hostfile"},
		{name: "version with an argument", args: []string{"version", "x"}, code: 2, where: "gorun version", fix: "--help"},
		{name: "launcher srun outside Slurm", args: append(dry, "--launcher", "srun", "--hosts", "n1:1,n2:1", "train.py"), code: 2, where: "--launcher srun", fix: "sbatch"},
		{name: "bad launcher", args: append(dry, "--launcher", "pdsh", "train.py"), code: 2, where: "--launcher", fix: "srun"},
		{name: "mistyped subcommand", args: []string{"preflght"}, code: 2, where: "preflght", fix: "gorun preflight"},
		{name: "mistyped hosts", args: []string{"host"}, code: 2, where: "host", fix: "gorun hosts"},
		{name: "missing training script", args: []string{"nope.py"}, code: 2, where: "nope.py", fix: "-m MODULE"},
		{name: "no training script", args: []string{"--nproc-per-node", "2"}, code: 2, where: "training_script", fix: "script"},
		{name: "format without dry-run", args: []string{"--format", "json", "train.py"}, code: 2, where: "--format", fix: "--dry-run"},
		{name: "bad format", args: []string{"--dry-run", "--format", "yaml", "train.py"}, code: 2, where: "--format", fix: "json"},
		{name: "preflight --help", args: []string{"preflight", "--help"}, code: 0, where: "usage: gorun preflight", fix: "--json"},
		{name: "unknown option", args: []string{"--bogus", "train.py"}, code: 2, where: "--bogus", fix: "--help"},
		{name: "overlong unknown option", args: []string{"--" + long, "train.py"}, code: 2, where: "--xxxx", fix: "--help"},
		{name: "bad --preflight", args: []string{"--preflight", "maybe", "train.py"}, code: 2, where: "--preflight", fix: "on"},
		{name: "bad --hang-timeout", args: []string{"--hang-timeout", "soon", "train.py"}, code: 2, where: "--hang-timeout", fix: "30m"},
		{name: "--hang-timeout-floor too short", args: []string{"--hang-timeout", "auto", "--hang-timeout-floor", "1s", "train.py"}, code: 2, where: "--hang-timeout-floor", fix: "at least 5s"},
		{name: "--hang-timeout below the floor", args: []string{"--hang-timeout", "1ms", "train.py"}, code: 2, where: "--hang-timeout", fix: "at least 5s"},
		{name: "bad --stop-grace", args: []string{"--stop-grace", "0", "train.py"}, code: 2, where: "--stop-grace", fix: "30s"},
		{name: "bad --signals-to-handle", args: []string{"--signals-to-handle", "SIGTERM,SIGFOO", "train.py"}, code: 2, where: "--signals-to-handle", fix: "SIGUSR1"},
		{name: "bad --max-restarts", args: []string{"--max-restarts", "-1", "train.py"}, code: 2, where: "--max-restarts", fix: ""},

		// Secrets: never printed.
		{name: "--env without =, secret-looking", args: append(dry, "--env", "HF_TOKEN"+secret, "train.py"), code: 2, where: "--env", fix: "NAME=VALUE", secret: secret},
		{name: "--env with a bad name", args: append(dry, "--env", "1BAD="+secret, "train.py"), code: 2, where: "--env", fix: "NAME=VALUE", secret: secret},
		{name: "--env NAME, a token typed without its =", args: append(dry, "--env", "HF_TOKEN_hf_abcdefghijklmnopqrstuvwxyz0123456789", "train.py"), code: 2, where: "--env", fix: "NAME=VALUE", secret: "hf_abcdefghijklmnopqrstuvwxyz0123456789"},
		{name: "--env token in table", args: append(dry, "--env", "HF_TOKEN="+secret, "train.py"), code: 0, where: "HF_TOKEN", fix: "hidden", secret: secret},
		{name: "--env password in json", args: append(dry, "--format", "json", "--env", "DB_PASSWORD="+secret, "train.py"), code: 0, where: "DB_PASSWORD", fix: "hidden", secret: secret},
		{name: "--env PAT in shell", args: append(dry, "--format", "shell", "--env", "GITHUB_PAT="+secret, "train.py"), code: 0, where: "GITHUB_PAT", fix: "export GORUN_HIDDEN_GITHUB_PAT", secret: secret},
		{name: "SSHPASS from the environment", env: []string{"SSHPASS=" + secret}, args: append(dry, "--env", "SSHPASS="+secret, "train.py"), code: 0, where: "SSHPASS", fix: "hidden", secret: secret},
		{name: "URL with a password", args: append(dry, "--format", "json", "--env", "DATA_URL=https://bob:"+secret+"@data.example", "train.py"), code: 0, where: "data.example", fix: "hidden", secret: secret},
		{name: "NCCL plugin key in preflight json", env: []string{"NCCL_PLUGIN_API_KEY=" + secret}, args: []string{"preflight", "--json", "train.py"}, code: 0, where: "NCCL_PLUGIN_API_KEY", fix: "hidden", secret: secret},

		// Validated on the head.
		{name: "rdzv endpoint port not a number", args: append(dry, "--rdzv-endpoint", "host:abc", "train.py"), code: 2, where: "--rdzv-endpoint", fix: "port"},
		{name: "rdzv endpoint port too large", args: append(dry, "--rdzv-endpoint", "host:99999", "train.py"), code: 2, where: "--rdzv-endpoint", fix: "65535"},
		{name: "rdzv endpoint negative port", args: append(dry, "--rdzv-endpoint", "host:-5", "train.py"), code: 2, where: "--rdzv-endpoint", fix: "65535"},
		{name: "rdzv endpoint unclosed bracket", args: append(dry, "--rdzv-endpoint", "[::1", "train.py"), code: 2, where: "--rdzv-endpoint", fix: "[::1]"},
		{name: "rdzv endpoint bare IPv6", args: append(dry, "--rdzv-endpoint", "::1:29500", "train.py"), code: 2, where: "--rdzv-endpoint", fix: "["},
		{name: "rdzv endpoint empty", args: append(dry, "--rdzv-endpoint=", "--rdzv-backend", "c10d", "train.py"), code: 2, where: "--rdzv-endpoint", fix: "host"},
		{name: "master addr empty", args: append(dry, "--master-addr=", "train.py"), code: 2, where: "--master-addr", fix: ""},
		{name: "node rank beyond nnodes", args: append(dry, "--nnodes", "2", "--node-rank", "5", "train.py"), code: 2, where: "--node-rank", fix: ""},
		{name: "master port 0", args: append(dry, "--master-port", "0", "train.py"), code: 2, where: "--master-port", fix: "65535"},
		{name: "master port 70000", args: append(dry, "--master-port", "70000", "train.py"), code: 2, where: "--master-port", fix: "65535"},
		{name: "--env MASTER_ADDR", args: append(dry, "--env", "MASTER_ADDR=10.0.0.1", "train.py"), code: 2, where: "MASTER_ADDR", fix: "--master-addr"},
		{name: "--env RANK", args: append(dry, "--env", "RANK=3", "train.py"), code: 2, where: "RANK", fix: "torchrun"},
		{name: "--env WORLD_SIZE", args: append(dry, "--env", "WORLD_SIZE=3", "train.py"), code: 2, where: "WORLD_SIZE", fix: "torchrun"},
		{name: "host name too long", args: append(dry, "--hosts", strings.Repeat("a", 64)+":1", "train.py"), code: 2, where: "--hosts", fix: "63"},
		{name: "host name with empty label", args: append(dry, "--hosts", "a..b:1", "train.py"), code: 2, where: "a..b", fix: ""},
		{name: "host name with a space", args: append(dry, "--hosts", "a b:1", "train.py"), code: 2, where: "--hosts", fix: ""},
		{name: "localhost beside 127.0.0.1", args: append(dry, "--hosts", "localhost:1,127.0.0.1:1", "train.py"), code: 2, where: "127.0.0.1", fix: "once"},
		{name: "duplicate host", args: append(dry, "--hosts", "a:1,a:1", "train.py"), code: 2, where: "a", fix: ""},
		{name: "include and exclude", args: append(dry, hosts2, "--include", "n1", "--exclude", "n2", "train.py"), code: 2, where: "--include", fix: ""},
		{name: "bad nproc-per-node", args: append(dry, "--nproc-per-node", "many", "train.py"), code: 2, where: "--nproc-per-node", fix: "gpu"},
		{name: "bad nnodes range", args: append(dry, "--nnodes", "4:2", "train.py"), code: 2, where: "--nnodes", fix: ""},
		{name: "bad Slurm node list", env: []string{"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=n[1-"}, args: append(dry, "train.py"), code: 2, where: "SLURM_JOB_NODELIST", fix: ""},

		// Messages: control characters escaped.
		{name: "escape sequence in an option", args: []string{"--\x1b[31mred", "train.py"}, code: 2, where: `\x1b`, fix: "--help"},
		{name: "escape sequence in a host", args: append(dry, "--hosts", "a\x1b]0;pwned\x07:1", "train.py"), code: 2, where: `\x1b`, fix: ""},
		{name: "UTF-8 host name named as it is", args: append(dry, "--hosts", "nœud:1", "train.py"), code: 2, where: "nœud", fix: ""},
	}
	return c
}

// refusedNodes writes an ssh_config F whose nodea and nodeb are ports
// nothing listens on, an empty known_hosts kh and the script x.py.
func refusedNodes(t *testing.T, dir string) {
	write(t, filepath.Join(dir, "F"), "Host nodea\n  HostName 127.0.0.1\n  Port 1\nHost nodeb\n  HostName 127.0.0.1\n  Port 2\n", 0o600)
	write(t, filepath.Join(dir, "kh"), "", 0o600)
	write(t, filepath.Join(dir, "x.py"), "print('hi')\n", 0o644)
}

// refusedManyNodes writes an ssh_config F and a hostfile hf of n nodes
// n0, n1, ... on a loopback port nothing listens on, a known_hosts kh with
// a line per node (as a generated cluster's head has), and x.py.
func refusedManyNodes(n int) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		var conf, hf, kh strings.Builder
		for i := range n {
			fmt.Fprintf(&conf, "Host n%d\n  HostName 127.0.%d.%d\n  Port 1\n", i, i/250, i%250+1)
			fmt.Fprintf(&hf, "n%d slots=1\n", i)
			fmt.Fprintf(&kh, "[127.0.%d.%d]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n", i/250, i%250+1)
		}
		write(t, filepath.Join(dir, "F"), conf.String(), 0o600)
		write(t, filepath.Join(dir, "hf"), hf.String(), 0o644)
		write(t, filepath.Join(dir, "kh"), kh.String(), 0o600)
		write(t, filepath.Join(dir, "x.py"), "print('hi')\n", 0o644)
	}
}

// atMostLines asserts that stderr holds at most n lines.
func atMostLines(n int) func(*testing.T, result) {
	return func(t *testing.T, r result) {
		t.Helper()
		if got := strings.Count(strings.TrimSuffix(r.stderr, "\n"), "\n") + 1; got > n {
			t.Errorf("%d lines of stderr, want at most %d:\n%.2000s", got, n, r.stderr)
		}
	}
}

// oneLinePerNode asserts that stderr names each node on exactly one line
// of its own ("node NAME: ..."), without go-multierror's count header,
// tab indent (which main would escape as \x09) or blank lines.
func oneLinePerNode(nodes ...string) func(*testing.T, result) {
	return func(t *testing.T, r result) {
		t.Helper()
		for _, bad := range []string{"errors occurred", "error occurred", `\x09`, "\t", "\n\n"} {
			if strings.Contains(r.stderr, bad) {
				t.Errorf("stderr holds %q:\n%s", bad, r.stderr)
			}
		}
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		for _, n := range nodes {
			var own int
			for _, l := range lines {
				if strings.HasPrefix(l, "node "+n+": ") {
					own++
				}
				if strings.Contains(l, n) && !strings.HasPrefix(l, "node "+n+": ") {
					t.Errorf("line %q names %s but is not its own line", l, n)
				}
			}
			if own != 1 {
				t.Errorf("%d lines start \"node %s: \", want 1:\n%s", own, n, r.stderr)
			}
		}
		if len(lines) != 1+len(nodes) {
			t.Errorf("%d lines, want a header and one per node:\n%s", len(lines), r.stderr)
		}
	}
}

// TestHostileInput runs every hostile input through the real binary:
// the exit code, a message that says where and how to fix, no secret
// anywhere, no terminal escape written raw, and nothing started.
func TestHostileInput(t *testing.T) {
	cases := hostileCases()
	if len(cases) < 60 {
		t.Fatalf("%d hostile inputs; the table promises at least 60", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t)
			s.nofile = tc.nofile
			if tc.setup != nil {
				tc.setup(t, s.dir)
			}
			start := time.Now()
			r := s.run(t, tc.env, tc.args)
			took := time.Since(start)
			out := r.stderr
			if tc.code == 0 {
				out = r.stdout + r.stderr
			}
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\nstderr: %.2000s", r.code, tc.code, r.stderr)
			}
			for _, want := range []string{tc.where, tc.fix} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%.2000s", want, out)
				}
			}
			if tc.secret != "" && strings.Contains(r.stdout+r.stderr, tc.secret) {
				t.Errorf("the secret value was printed:\n%.2000s", r.stdout+r.stderr)
			}
			if strings.ContainsAny(r.stderr, "\x1b\x07") {
				t.Errorf("a raw control character reached stderr: %q", r.stderr)
			}
			if len(r.stderr) > 4096 {
				t.Errorf("stderr is %d bytes; overlong input must be cut", len(r.stderr))
			}
			if tc.code != 0 && s.started() {
				t.Error("torchrun was started")
			}
			if took > 10*time.Second {
				t.Errorf("took %v", took)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// TestRdzvEndpointByBackend pins what docs/guide.md's "Bad input" says of
// --rdzv-endpoint, backend by backend, through the real binary.
func TestRdzvEndpointByBackend(t *testing.T) {
	for _, tc := range []struct {
		args []string // before the script
		ok   bool
	}{
		{[]string{"--rdzv-endpoint", "host"}, false}, // static (the default) needs a port
		{[]string{"--rdzv-endpoint", "host:0"}, false},
		{[]string{"--rdzv-backend", "static", "--rdzv-endpoint", "host:65535"}, true},
		{[]string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "host"}, true},
		{[]string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "host:0"}, true}, // one node
		{[]string{"--rdzv-backend", "c10d", "--nnodes", "2", "--rdzv-endpoint", "host"}, true},
		{[]string{"--rdzv-backend", "c10d", "--nnodes", "2", "--rdzv-endpoint", "host:0"}, false},
		{[]string{"--rdzv-backend", "c10d", "--nnodes", "1:2", "--rdzv-endpoint", "host:0"}, false},
		{[]string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "host:70000"}, false},
		{[]string{"--rdzv-backend", "c10d", "--rdzv-endpoint="}, false},
		{[]string{"--rdzv-backend", "etcd", "--rdzv-endpoint", "host"}, true},
		{[]string{"--rdzv-backend", "etcd", "--rdzv-endpoint", "host:0"}, false},
		{[]string{"--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "host"}, true},
		{[]string{"--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "host:0"}, false},
		{[]string{"--rdzv-backend", "mine", "--rdzv-endpoint", "::1:junk"}, true}, // another backend's business
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			s := newSandbox(t)
			args := append(append([]string{"--dry-run", "--preflight", "off"}, tc.args...), "train.py")
			r := s.run(t, nil, args)
			if want := map[bool]int{true: 0, false: 2}[tc.ok]; r.code != want {
				t.Errorf("exit %d, want %d\nstderr: %s", r.code, want, r.stderr)
			}
			if !tc.ok && !strings.Contains(r.stderr, "--rdzv-endpoint") {
				t.Errorf("the refusal does not name --rdzv-endpoint:\n%s", r.stderr)
			}
		})
	}
}

// TestInterrupted sends SIGINT or SIGTERM once gorun is seen waiting on
// a node in the phase the case names (the fake SSH server accepted its
// connection; the wedged probe started): exit 130 within a second, a line
// that says it was interrupted in that phase, nothing started.
func TestInterrupted(t *testing.T) {
	// An "SSH server" that accepts and never answers; ready closes at its
	// first connection, when gorun is in the handshake.
	silent := func(t *testing.T, dir string) <-chan struct{} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		ready := make(chan struct{})
		go func() {
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if held = append(held, c); len(held) == 1 {
					close(ready)
				}
			}
		}()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		write(t, filepath.Join(dir, "ssh_config"), "Host blackhole\n  HostName 127.0.0.1\n  Port "+port+"\n", 0o600)
		write(t, filepath.Join(dir, "known_hosts"), "", 0o600)
		return ready
	}
	// A torchrun whose Python never answers the torch probe: a wedged
	// preflight collector. The probe says it started through a FIFO the
	// test holds open for reading and writing (so neither side blocks in
	// open), then hangs; ready closes when its line arrives.
	wedged := func(t *testing.T, dir string) <-chan struct{} {
		fifo := filepath.Join(dir, "probe-started")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(fifo, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() }) // after the run: a late probe's write never blocks
		ready := make(chan struct{})
		go func() {
			if _, err := f.Read(make([]byte, 1)); err == nil {
				close(ready)
			}
		}()
		write(t, filepath.Join(dir, "hang-python"), "#!/bin/sh\necho started > "+fifo+"\nexec sleep "+wedgedSleep+"\n", 0o755)
		write(t, filepath.Join(dir, "wedged-torchrun"), "#!"+filepath.Join(dir, "hang-python")+"\n", 0o755)
		return ready
	}
	const (
		connecting = "interrupted while connecting to the nodes"
		preflight  = "interrupted during preflight"
	)
	for _, tc := range []struct {
		name  string
		setup func(*testing.T, string) <-chan struct{}
		args  []string
		sig   syscall.Signal
		phase string // in the message
	}{
		{"SIGINT during the SSH handshake", silent, []string{"--ssh-config", "ssh_config", "--known-hosts", "known_hosts", "--hosts", "blackhole:1", "train.py"}, syscall.SIGINT, connecting},
		{"SIGTERM during the SSH handshake", silent, []string{"--ssh-config", "ssh_config", "--known-hosts", "known_hosts", "--hosts", "blackhole:1", "train.py"}, syscall.SIGTERM, connecting},
		{"SIGINT during a wedged preflight", wedged, []string{"--torchrun", "./wedged-torchrun", "train.py"}, syscall.SIGINT, preflight + "; nothing was started"},
		{"SIGTERM during a wedged preflight", wedged, []string{"preflight", "--torchrun", "./wedged-torchrun", "train.py"}, syscall.SIGTERM, preflight},
		{"SIGHUP during a wedged preflight", wedged, []string{"--torchrun", "./wedged-torchrun", "train.py"}, syscall.SIGHUP, preflight},
		{"SIGQUIT during the SSH handshake", silent, []string{"--ssh-config", "ssh_config", "--known-hosts", "known_hosts", "--hosts", "blackhole:1", "train.py"}, syscall.SIGQUIT, connecting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t)
			ready := tc.setup(t, s.dir)
			r := s.runInterrupted(t, nil, tc.args, tc.sig, ready)
			// 128+N, as a shell reports a process killed by signal N.
			if want := 128 + int(tc.sig); r.code != want {
				t.Errorf("exit %d, want %d\nstderr: %s", r.code, want, r.stderr)
			}
			if strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("a Go dump on stderr: %s", r.stderr)
			}
			if r.took > time.Second {
				t.Errorf("exited %v after the signal, want within 1 s", r.took)
			}
			if !strings.Contains(r.stderr, tc.phase) {
				t.Errorf("no line says %q:\n%s", tc.phase, r.stderr)
			}
			if s.started() {
				t.Error("torchrun was started")
			}
			// The wedged probe went with gorun (its collector's process
			// group was killed), though the test signalled gorun alone.
			if out, err := exec.Command("pgrep", "-f", "sleep "+wedgedSleep).Output(); err == nil {
				t.Errorf("the wedged probe outlived gorun: pids %s", out)
			}
		})
	}
}

// wedgedSleep is the hung probe's argument, unique enough for pgrep.
const wedgedSleep = "613.25"

// TestReportHidesSecrets runs a (fake) job with --report and --telemetry:
// the files people share carry no secret from the command line.
func TestReportHidesSecrets(t *testing.T) {
	s := newSandbox(t)
	r := s.run(t, nil, []string{"--preflight", "off", "--report", "r.html", "--telemetry", "t.jsonl",
		"--env", "HF_TOKEN=" + secret, "--env", "DATA=https://u:" + secret + "@h/x", "train.py"})
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	report, err := os.ReadFile(filepath.Join(s.dir, "r.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "HF_TOKEN") {
		t.Errorf("the report does not show the command line")
	}
	for _, f := range []string{"r.html", "t.jsonl"} {
		b, _ := os.ReadFile(filepath.Join(s.dir, f))
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the secret", f)
		}
	}
	if strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("the output holds the secret")
	}
}
