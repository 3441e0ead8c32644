package examples

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// The signal tests run testcluster/checkpoint.py, whose ranks leave a file
// per signal they get in a directory every node sees, so the counts are
// the workers' own, not gorun's word.

func ckptScript(t *testing.T) string { return absPath(t, "testcluster/checkpoint.py") }

// markDir is a directory the workers write their marker files to.
func markDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitMarkers waits until n ranks have left a rank<R>.<name> file in dir,
// and returns how long that took.
func waitMarkers(t *testing.T, r *run, dir, name string, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got, _ := filepath.Glob(filepath.Join(dir, "rank*."+name))
		if len(got) >= n {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%d of %d ranks left a %s marker within %v:\n%s", len(got), n, name, timeout, r.output())
		}
		select {
		case <-r.done:
			if len(got) < n {
				t.Fatalf("gorun exited with %d of %d %s markers:\n%s", len(got), n, name, r.output())
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// markerCounts is how many times each rank noted name (lines in its file).
func markerCounts(t *testing.T, dir, name string, ranks int) []int {
	t.Helper()
	counts := make([]int, ranks)
	for r := range ranks {
		b, err := os.ReadFile(filepath.Join(dir, "rank"+strconv.Itoa(r)+"."+name))
		if err == nil {
			counts[r] = strings.Count(string(b), "\n")
		}
	}
	return counts
}

// everyOnce fails unless every rank counted name exactly once.
func everyOnce(t *testing.T, dir, name string, ranks int, r *run) {
	t.Helper()
	for rank, n := range markerCounts(t, dir, name, ranks) {
		if n != 1 {
			t.Errorf("rank %d got %s %d times, want once:\n%s", rank, name, n, r.output())
		}
	}
}

// clusterSignalRun starts checkpoint.py on 3 nodes × 2 ranks and waits
// until every rank is ready.
func clusterSignalRun(t *testing.T, env []string, extra ...string) (*run, string, string) {
	t.Helper()
	return clusterSignalRunFrom(t, nil, env, extra...)
}

// clusterSignalRunFrom is clusterSignalRun with head added to gorun's own
// environment.
func clusterSignalRunFrom(t *testing.T, head, env []string, extra ...string) (*run, string, string) {
	t.Helper()
	c := needCluster(t, 3)
	mark, dir := marker(t), markDir(t)
	args := append(c.sshArgs(), "--hosts", c.hostsFlag(2), "--torchrun", shim(t), "--preflight", "off")
	args = append(args, extra...)
	args = append(args, "--env", "MARK_DIR="+dir, "--env", "GORUN_MARK="+mark)
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	r := startGorun(t, append([]string{"GORUN_MARK=" + mark}, head...), append(args, ckptScript(t), mark)...)
	waitMarkers(t, r, dir, "ready", 6, 3*time.Minute)
	return r, mark, dir
}

// TestClusterSIGUSR1Passed: SIGUSR1 to gorun reaches all 6 workers, once
// each, within 1 s, stops nothing, and the job runs to success.
func TestClusterSIGUSR1Passed(t *testing.T) {
	r, mark, dir := clusterSignalRun(t, []string{"STEPS=80", "STEP_SLEEP=0.1"})
	if err := r.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	took := waitMarkers(t, r, dir, "usr1", 6, time.Second)
	r.waitLine(t, `gorun: SIGUSR1 passed to 6 workers on 3 nodes`, 5*time.Second)
	if code := r.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d after SIGUSR1, want 0 (the job runs on):\n%s", code, r.output())
	}
	everyOnce(t, dir, "usr1", 6, r)
	noneLeft(t, mark, 5*time.Second)
	t.Logf("SIGUSR1 reached all 6 workers within %v", took)
}

// TestClusterSIGTERMCheckpoint: SIGTERM to gorun while every worker spends
// 10 s writing its checkpoint. With the default grace (30 s) every
// checkpoint completes and gorun exits 143 after 10-15 s; with
// --stop-grace 2s the workers are killed at about 2 s, checkpoints lost.
// torchrun's names for the grace (2.12 and later) mean the same:
// --shutdown-timeout 45 lets a 40 s checkpoint complete, where the
// default would kill it at 30 s; TORCH_ELASTIC_SHUTDOWN_TIMEOUT=2 kills at
// 2 s; --stop-grace wins over --shutdown-timeout.
func TestClusterSIGTERMCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		head     []string // gorun's own environment
		env      []string // the workers'
		extra    []string
		min, max time.Duration // from SIGTERM to gorun's exit
		complete bool
	}{
		{"default grace", nil, []string{"CKPT_SECS=10"}, nil, 10 * time.Second, 15 * time.Second, true},
		{"stop-grace 2s", nil, []string{"CKPT_SECS=10"}, []string{"--stop-grace", "2s"}, 2 * time.Second, 4 * time.Second, false},
		{"shutdown-timeout 45", nil, []string{"CKPT_SECS=40"}, []string{"--shutdown-timeout", "45"}, 40 * time.Second, 45 * time.Second, true},
		{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=2", []string{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=2"}, []string{"CKPT_SECS=10"}, nil, 2 * time.Second, 4 * time.Second, false},
		{"stop-grace wins over shutdown-timeout", nil, []string{"CKPT_SECS=10"}, []string{"--shutdown-timeout", "45", "--stop-grace", "2s"}, 2 * time.Second, 4 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, mark, dir := clusterSignalRunFrom(t, tc.head, tc.env, tc.extra...)
			start := time.Now()
			if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := r.wait(t, tc.max+20*time.Second)
			took := time.Since(start)
			if code != 143 {
				t.Errorf("exit %d after SIGTERM, want 143:\n%s", code, r.output())
			}
			if took < tc.min || took > tc.max {
				t.Errorf("gorun exited %v after SIGTERM, want %v to %v:\n%s", took, tc.min, tc.max, r.output())
			}
			everyOnce(t, dir, "term", 6, r)
			done, _ := filepath.Glob(filepath.Join(dir, "rank*.ckpt"))
			if tc.complete && len(done) != 6 {
				t.Errorf("%d of 6 checkpoints complete, want all:\n%s", len(done), r.output())
			}
			if !tc.complete && len(done) != 0 {
				t.Errorf("%d checkpoints complete after a 2 s grace, want none (killed)", len(done))
			}
			noneLeft(t, mark, 5*time.Second)
			t.Logf("exit %d %v after SIGTERM; %d checkpoints complete", code, took, len(done))
		})
	}
}

// TestClusterGorunProcessKilled: SIGKILL of a node's agent or of one
// worker's supervisor leaves nothing of the job on any node within 5 s.
// (SIGKILL of the head itself: TestClusterHeadKilled.)
func TestClusterGorunProcessKilled(t *testing.T) {
	for _, victim := range []string{wire.AgentCommand, wire.RankCommand} {
		t.Run(victim, func(t *testing.T) {
			// CKPT_SECS=0: the other workers, stopped because one failed,
			// end at once.
			r, mark, _ := clusterSignalRun(t, []string{"CKPT_SECS=0"})
			pid := 0
			for _, p := range leftovers(mark) {
				// "PID gorun _rank ...": not torchrun, whose command line names _rank too
				if f := strings.Fields(p); len(f) > 2 && f[2] == victim {
					pid = atoiOr(f[0])
					break
				}
			}
			if pid == 0 {
				t.Fatalf("no gorun %s process found:\n%s", victim, strings.Join(leftovers(mark), "\n"))
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			took := noneLeft(t, mark, 5*time.Second)
			// gorun sees a lost node or a killed worker and ends the run.
			code := r.wait(t, 20*time.Second)
			if code == 0 {
				t.Errorf("exit 0 after a SIGKILL of gorun %s:\n%s", victim, r.output())
			}
			// The agents' directories (socket, heartbeat files) go too:
			// needCluster's noAgentDirLeft.
			t.Logf("every process gone %v after SIGKILL of gorun %s; gorun exited %d", took, victim, code)
		})
	}
}

func atoiOr(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// runPids are the processes of a local run, gorun itself included, each
// once: a signal "to every process" reaches each once, as Slurm's does (a
// second SIGTERM to gorun would be a second stop: kill at once).
func runPids(r *run, mark string) []int {
	seen := map[int]bool{r.cmd.Process.Pid: true}
	pids := []int{r.cmd.Process.Pid}
	for _, p := range leftovers(mark) {
		pidText, _, _ := strings.Cut(p, " ")
		if pid := atoiOr(pidText); pid != 0 && !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids
}

// agentDirs are the node agents' directories there are now (the nodes
// share this machine's /tmp).
func agentDirs() map[string]bool {
	dirs := map[string]bool{}
	got, _ := filepath.Glob(filepath.Join(os.TempDir(), "gorun-agent-*"))
	for _, d := range got {
		dirs[d] = true
	}
	return dirs
}

// execGorun is the gorun command with env added, not started.
func execGorun(args, env []string) *exec.Cmd {
	cmd := exec.Command(gorunBin, args...)
	cmd.Env = append(append(os.Environ(), env...), "NO_COLOR=1", "PYTHONUNBUFFERED=1")
	return cmd
}

// TestClusterStuckStdout: Ctrl-C while nobody reads gorun's stdout (a pipe
// whose reader never reads) and every worker floods it: gorun still exits
// within a few seconds (the workers end at once on SIGINT), says on stderr
// what it dropped, and nothing is left.
func TestClusterStuckStdout(t *testing.T) {
	c := needCluster(t, 3)
	mark, dir := marker(t), markDir(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close() // never read until the end
	args := append(c.sshArgs(), "--hosts", c.hostsFlag(2), "--torchrun", shim(t), "--preflight", "off",
		"--env", "MARK_DIR="+dir, "--env", "GORUN_MARK="+mark, "--env", "FLOOD=1", "--env", "CKPT_SECS=0",
		ckptScript(t), mark)
	cmd := execGorun(args, []string{"GORUN_MARK=" + mark})
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	waitFor(t, 3*time.Minute, func() bool {
		got, _ := filepath.Glob(filepath.Join(dir, "rank*.ready"))
		return len(got) == 6
	})
	time.Sleep(2 * time.Second) // the pipe is full and the workers block on print
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		err := waitErr
		took := time.Since(start)
		code := cmd.ProcessState.ExitCode()
		if code != 130 {
			t.Errorf("exit %d (%v), want 130; stderr:\n%s", code, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "output were dropped") {
			t.Errorf("stderr does not say what was dropped:\n%s", stderr.String())
		}
		// The workers end at once on SIGINT: the grace (30 s) is not
		// needed, so gorun must not wait for the reader at all; 5 s is
		// the margin for a loaded machine.
		if took > 5*time.Second {
			t.Errorf("gorun exited %v after SIGINT with its output stuck, want within 5 s", took)
		}
		t.Logf("exit %d %v after SIGINT with nobody reading its output", code, took)
	case <-time.After(40 * time.Second):
		t.Fatal("gorun still running 40 s after SIGINT with its output stuck")
	}
	noneLeft(t, mark, 5*time.Second)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond until it holds, at most timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not so within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLocalSignals: local mode, 2 ranks. SIGUSR1 reaches each worker once
// and stops nothing; Ctrl-C raises KeyboardInterrupt in each, once, and
// gorun exits 130; a signal sent to every process of the run at once (as
// Slurm signals a step) kills neither gorun nor torchrun, and each worker
// still counts it once.
func TestLocalSignals(t *testing.T) {
	needTorch(t)
	start := func(t *testing.T, env ...string) (*run, string, string) {
		mark, dir := marker(t), markDir(t)
		env = append([]string{"CKPT_SECS=0"}, append(env, "GORUN_MARK="+mark, "MARK_DIR="+dir)...)
		r := startGorun(t, env, "--torchrun", shim(t), "--nproc-per-node", "2", "--preflight", "off", ckptScript(t), mark)
		waitMarkers(t, r, dir, "ready", 2, 2*time.Minute)
		return r, mark, dir
	}
	t.Run("SIGUSR1", func(t *testing.T) {
		r, mark, dir := start(t, "STEPS=40")
		r.cmd.Process.Signal(syscall.SIGUSR1)
		waitMarkers(t, r, dir, "usr1", 2, time.Second)
		if code := r.wait(t, time.Minute); code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, r.output())
		}
		everyOnce(t, dir, "usr1", 2, r)
		noneLeft(t, mark, 5*time.Second)
	})
	t.Run("Ctrl-C", func(t *testing.T) {
		r, mark, dir := start(t)
		r.cmd.Process.Signal(syscall.SIGINT)
		if code := r.wait(t, 10*time.Second); code != 130 {
			t.Fatalf("exit %d, want 130:\n%s", code, r.output())
		}
		everyOnce(t, dir, "int", 2, r)
		if got, _ := filepath.Glob(filepath.Join(dir, "rank*.ckpt")); len(got) != 2 {
			t.Errorf("%d of 2 workers saved on KeyboardInterrupt:\n%s", len(got), r.output())
		}
		noneLeft(t, mark, 5*time.Second)
	})
	t.Run("SIGUSR1 to every process", func(t *testing.T) {
		r, mark, dir := start(t, "STEPS=40")
		pids := runPids(r, mark)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGUSR1)
		}
		waitMarkers(t, r, dir, "usr1", 2, time.Second)
		if code := r.wait(t, time.Minute); code != 0 {
			t.Fatalf("exit %d after SIGUSR1 to every process (%d), want 0:\n%s", code, len(pids), r.output())
		}
		everyOnce(t, dir, "usr1", 2, r)
		noneLeft(t, mark, 5*time.Second)
	})
	t.Run("SIGTERM to every process", func(t *testing.T) {
		// Workers still saving when a late copy would come.
		r, mark, dir := start(t, "CKPT_SECS=0.5")
		pids := runPids(r, mark)
		// gorun first, the rest 30 ms later: on a loaded machine a
		// signal to every process spreads out, and gorun's own word of
		// it can reach the workers' supervisors before their copies.
		syscall.Kill(pids[0], syscall.SIGTERM)
		time.Sleep(30 * time.Millisecond)
		for _, pid := range pids[1:] {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		if code := r.wait(t, 15*time.Second); code != 143 {
			t.Fatalf("exit %d after SIGTERM to every process, want 143:\n%s", code, r.output())
		}
		everyOnce(t, dir, "term", 2, r)
		noneLeft(t, mark, 5*time.Second)
	})
}
