package examples

// End-to-end tests of gorun under Slurm: a real Slurm 22.05 cluster
// (testcluster/slurm-cluster.sh: munged and slurmctld on this machine, one
// slurmd per network-namespace node, no SSH server in any node), the job
// scripts of slurm/ submitted with sbatch as a user would, Debian's torchrun
// (through the shim) and real gloo DDP workers. The job scripts run the
// gorun TestMain built (GORUN=...).
//
// They run when GORUN_E2E=1 and GORUN_SLURM names the cluster's state
// directory (.ci/test brings one up: slurm-cluster.sh up 4), and skip
// otherwise; with both set, a cluster that is not there is a failure.

import (
	"bufio"
	"context"
	"fmt"
	"github.com/gorun/gorun/internal/testenv"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// slurmCluster is the test cluster as the tests see it from this machine.
type slurmCluster struct {
	state string      // slurm-cluster.sh's STATE
	conf  string      // SLURM_CONF for every client
	nodes []slurmNode // the first n of all, which a test's job runs on
	all   []slurmNode // every node of the cluster, for what is left
}

// slurmNode is one node: its namespaces and the processes that are the
// cluster's own, which outlive every job.
type slurmNode struct {
	name          string
	net, pid, uts string // namespace links, "net:[4026531840]"
	// own: the unshare holding the node's PID namespace, the init (pid 1
	// there), and slurmd with the nsenter that started it.
	own    map[int]bool
	slurmd int // its slurmd, in the node's namespaces (mount included)
}

// proc is what the tests read of one process from /proc.
type proc struct {
	pid, ppid     int
	comm, cmdline string
	net, pnsID    string // the network and PID namespace links
	uts           string
	initOfNS      bool // pid 1 of its PID namespace
}

// readProc reads pid's entry; ok is false when it is gone or a zombie.
func readProc(pid int) (p proc, ok bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return p, false
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	s := string(stat)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return p, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 || f[0] == "Z" {
		return p, false
	}
	p.pid = pid
	p.ppid, _ = strconv.Atoi(f[1])
	comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
	p.comm = strings.TrimSpace(string(comm))
	cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	p.cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	p.net, _ = os.Readlink(filepath.Join(dir, "ns", "net"))
	p.pnsID, _ = os.Readlink(filepath.Join(dir, "ns", "pid"))
	p.uts, _ = os.Readlink(filepath.Join(dir, "ns", "uts"))
	status, _ := os.ReadFile(filepath.Join(dir, "status"))
	for _, line := range strings.Split(string(status), "\n") {
		if rest, found := strings.CutPrefix(line, "NSpid:"); found {
			ids := strings.Fields(rest)
			p.initOfNS = len(ids) > 1 && ids[len(ids)-1] == "1"
		}
	}
	return p, p.net != ""
}

// allProcs lists every live process but this test's.
func allProcs() []proc {
	var ps []proc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if p, ok := readProc(pid); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// needSlurm finds the cluster GORUN_SLURM names, by its slurmd processes
// (each runs in its node's namespaces with -N nodeI and the cluster's
// slurm.conf), and checks it has n nodes.
func needSlurm(t *testing.T, n int) slurmCluster {
	t.Helper()
	state := os.Getenv("GORUN_SLURM")
	if !testenv.E2E() {
		t.Skip("skipping: the Slurm tests need GORUN_E2E=1 and GORUN_SLURM=<state dir> (examples/testcluster/slurm-cluster.sh up 4)")
	}
	// Under GORUN_E2E=1 a missing cluster fails, as a missing tool does.
	need(t, state != "", "GORUN_SLURM is not set (examples/testcluster/slurm-cluster.sh up 4, then GORUN_SLURM=<its state dir>)")
	needTorch(t)
	c := slurmCluster{state: state, conf: filepath.Join(state, "slurm.conf")}
	if _, err := os.Stat(c.conf); err != nil {
		t.Fatalf("GORUN_SLURM=%s: no Slurm test cluster there: %v", state, err)
	}
	for _, tool := range []string{"sbatch", "scancel", "scontrol"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("GORUN_SLURM is set but %s is not on PATH", tool)
		}
	}
	procs := allProcs()
	byPid := make(map[int]proc, len(procs))
	for _, p := range procs {
		byPid[p.pid] = p
	}
	nameArg := regexp.MustCompile(` -N (\S+)`)
	for _, p := range procs {
		m := nameArg.FindStringSubmatch(p.cmdline)
		parent := byPid[p.ppid]
		if p.comm != "slurmd" || parent.comm != "nsenter" || m == nil || !strings.Contains(p.cmdline, c.conf) {
			continue // not a node's slurmd (or a child it forked)
		}
		node := slurmNode{name: m[1], net: p.net, pid: p.pnsID, uts: p.uts, slurmd: p.pid, own: map[int]bool{p.pid: true, parent.pid: true}}
		for _, q := range procs {
			if q.initOfNS && q.pnsID == p.pnsID {
				node.own[q.pid], node.own[q.ppid] = true, true // the init, and the unshare above it
			}
		}
		if len(node.own) != 4 {
			t.Fatalf("%s: want slurmd, nsenter, the init and unshare as its own processes, found pids %v", node.name, node.own)
		}
		c.all = append(c.all, node)
	}
	sort.Slice(c.all, func(i, j int) bool { return c.all[i].name < c.all[j].name })
	if len(c.all) < n {
		t.Fatalf("GORUN_SLURM=%s: want %d nodes' slurmd running, found %d", state, n, len(c.all))
	}
	c.nodes = c.all[:n]
	return c
}

// nodeOf returns the node whose network namespace net is.
func (c slurmCluster) nodeOf(net string) (slurmNode, bool) {
	for _, n := range c.all {
		if n.net == net {
			return n, true
		}
	}
	return slurmNode{}, false
}

// leftovers lists every process in the nodes but the cluster's own:
// after a job, nothing of it may be left (slurmstepd included).
func (c slurmCluster) leftovers() []string {
	var left []string
	for _, p := range allProcs() {
		if n, ok := c.nodeOf(p.net); ok && !n.own[p.pid] {
			left = append(left, fmt.Sprintf("%s: %d %s", n.name, p.pid, p.cmdline))
		}
	}
	return left
}

// noneLeft waits up to timeout for the nodes to hold the cluster's own
// processes only, and returns how long that took.
func (c slurmCluster) noneLeft(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		left := c.leftovers()
		if len(left) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%d processes left in the nodes after %v:\n%s", len(left), timeout, strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nsWatch samples the nodes while a job runs: which nodes ran training
// workers inside their own PID and UTS namespaces, which ran them outside
// them, and any sshd found in a node.
type nsWatch struct {
	mu       sync.Mutex
	workers  map[string]bool // node → a worker seen in the node's namespaces
	strays   map[string]bool // workers in a node's netns but another PID/UTS namespace
	sshd     map[string]bool
	stop     chan struct{}
	finished chan struct{}
}

func (c slurmCluster) watch() *nsWatch {
	w := &nsWatch{workers: map[string]bool{}, strays: map[string]bool{}, sshd: map[string]bool{},
		stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range allProcs() {
				n, ok := c.nodeOf(p.net)
				if !ok {
					continue
				}
				w.mu.Lock()
				switch {
				case p.comm == "sshd":
					w.sshd[fmt.Sprintf("%s: %d %s", n.name, p.pid, p.cmdline)] = true
				case strings.Contains(p.cmdline, "train_ddp.py") && !strings.Contains(p.cmdline, "torchrun"):
					if p.pnsID == n.pid && p.uts == n.uts {
						w.workers[n.name] = true
					} else {
						w.strays[fmt.Sprintf("%s: %d %s (pid %s uts %s)", n.name, p.pid, p.cmdline, p.pnsID, p.uts)] = true
					}
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *nsWatch) end() {
	close(w.stop)
	<-w.finished
}

// slurmJobTimeout bounds one job: a 3-node run takes 20-80 s on the
// loaded 2-core CI machine, a restarted one up to twice that.
const slurmJobTimeout = 6 * time.Minute

// jobEnv is the environment every job script gets (sbatch passes the
// submitter's on): the cluster, the gorun under test, the shim and the
// training script, and the test's knobs.
func (c slurmCluster) jobEnv(t *testing.T, extra ...string) []string {
	env := append(os.Environ(),
		"SLURM_CONF="+c.conf,
		"GORUN="+gorunBin,
		"TORCHRUN="+shim(t),
		"TRAIN="+script(t),
		"NO_COLOR=1", "PYTHONUNBUFFERED=1")
	return append(env, extra...)
}

// submit runs sbatch --parsable with args (options, then the script) and
// returns the job's id and its output file. With wait, sbatch --wait
// returns when the job has ended; code is then sbatch's exit status, the
// job's. A job still there when the test ends is cancelled.
func (c slurmCluster) submit(t *testing.T, wait bool, env []string, args ...string) (id, outFile string, code int) {
	t.Helper()
	outFile = filepath.Join(t.TempDir(), "job-%j.out")
	argv := []string{"--parsable", "--output", outFile}
	if wait {
		argv = append(argv, "--wait")
	}
	ctx, cancel := context.WithTimeout(context.Background(), slurmJobTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sbatch", append(argv, args...)...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	id, _, _ = strings.Cut(strings.TrimSpace(line), ";") // "ID" or "ID;cluster"
	if id != "" {
		t.Cleanup(func() {
			// Nothing of a failed test may reach the next one.
			s := exec.Command("scancel", id)
			s.Env = env
			_ = s.Run()
		})
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("sbatch %v: job %s still running after %v", args, id, slurmJobTimeout)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sbatch %v: %v", args, err)
	}
	if id == "" {
		t.Fatalf("sbatch %v: no job id (exit %d): %s", args, code, stderr.String())
	}
	if wait {
		t.Logf("job %s ended with %d after %v", id, code, time.Since(start).Round(100*time.Millisecond))
	}
	return id, strings.ReplaceAll(outFile, "%j", id), code
}

// jobState is the JobState scontrol reports for id.
func (c slurmCluster) jobState(t *testing.T, env []string, id string) string {
	t.Helper()
	cmd := exec.Command("scontrol", "show", "job", "-o", id)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scontrol show job %s: %v", id, err)
	}
	m := regexp.MustCompile(`\bJobState=(\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("scontrol show job %s: no JobState in %s", id, out)
	}
	return string(m[1])
}

func readOutput(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the job's output: %v", err)
	}
	return string(b)
}

// finishedRank is one "params-in-sync OK" line of train_ddp.py: the host
// that printed it (its UTS hostname), its rank and world size, and gorun's
// prefix node ("" in srun gorun's plain output).
type finishedRank struct {
	prefix, host string
	rank, world  int
}

var finishedLine = regexp.MustCompile(`^(?:\[(\S+) \d+(?: r\d+)?\] )?\[(\S+) rank=(\d+)/(\d+) .*params-in-sync OK`)

func finishedRanks(out string) []finishedRank {
	var rs []finishedRank
	for _, line := range strings.Split(out, "\n") {
		if m := finishedLine.FindStringSubmatch(line); m != nil {
			r, _ := strconv.Atoi(m[3])
			w, _ := strconv.Atoi(m[4])
			rs = append(rs, finishedRank{prefix: m[1], host: m[2], rank: r, world: w})
		}
	}
	return rs
}

// checkRanks asserts world ranks 0..world-1 each finished once, in sync,
// perNode of them on each node of c.
func (c slurmCluster) checkRanks(t *testing.T, out string, world, perNode int) []finishedRank {
	t.Helper()
	rs := finishedRanks(out)
	seen := map[int]int{}
	onNode := map[string]int{}
	for _, r := range rs {
		if r.world != world {
			t.Errorf("rank %d on %s saw world size %d, want %d", r.rank, r.host, r.world, world)
		}
		seen[r.rank]++
		onNode[r.host]++
	}
	for r := 0; r < world; r++ {
		if seen[r] != 1 {
			t.Errorf("rank %d finished %d times, want once", r, seen[r])
		}
	}
	for _, n := range c.nodes {
		if onNode[n.name] != perNode {
			t.Errorf("%s: %d ranks finished there, want %d", n.name, onNode[n.name], perNode)
		}
	}
	if len(rs) != world || t.Failed() {
		t.Fatalf("want %d ranks in sync, got %d:\n%s", world, len(rs), out)
	}
	return rs
}

// TestSlurmHeadDDP: `sbatch gorun.sbatch` on 3 nodes, gorun once in the
// batch script reaching every node through srun: 6 gloo ranks in sync,
// each line prefixed by the node it ran on, every worker inside its node's
// namespaces, no sshd anywhere in the nodes, nothing left after.
func TestSlurmHeadDDP(t *testing.T) {
	c := needSlurm(t, 3)
	env := c.jobEnv(t, "GORUN_OPTS=--env STEPS=20 --env STEP_SLEEP=0.1")
	w := c.watch()
	_, outFile, code := c.submit(t, true, env, "--nodes=3", "slurm/gorun.sbatch")
	w.end()
	out := readOutput(t, outFile)
	if code != 0 {
		t.Fatalf("sbatch --wait exited %d:\n%s", code, out)
	}
	for _, r := range c.checkRanks(t, out, 6, 2) {
		if r.prefix != r.host {
			t.Errorf("rank %d ran on %s but its line is prefixed %q", r.rank, r.host, r.prefix)
		}
	}
	if !strings.Contains(out, "job:        3 nodes x 2 processes = 6 ranks") {
		t.Errorf("the plan is not 3 nodes x 2 processes:\n%s", out)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.sshd) > 0 {
		t.Errorf("sshd ran in the Slurm nodes during the job:\n%s", strings.Join(slices.Sorted(maps.Keys(w.sshd)), "\n"))
	}
	if len(w.strays) > 0 {
		t.Errorf("workers outside their node's PID/UTS namespaces:\n%s", strings.Join(slices.Sorted(maps.Keys(w.strays)), "\n"))
	}
	for _, n := range c.nodes {
		if !w.workers[n.name] {
			t.Errorf("no worker seen in %s's namespaces while the job ran", n.name)
		}
	}
	c.noneLeft(t, 10*time.Second)
}

// TestSlurmHeadRestart: rank 3 crashes on attempt 0; gorun stops the
// group and restarts it as new job steps (each worker prints the
// SLURM_STEP_ID it inherited from its node's agent step), and the job
// succeeds on attempt 1.
func TestSlurmHeadRestart(t *testing.T) {
	c := needSlurm(t, 3)
	env := c.jobEnv(t, "GORUN_OPTS=--max-restarts 1 --env CRASH_RANK=3 --env CRASH_ON_ATTEMPT=0 --env CRASH_CODE=9 --env PRINT_ENV=SLURM_PROCID,SLURM_STEP_ID")
	_, outFile, code := c.submit(t, true, env, "--nodes=3", "slurm/gorun.sbatch")
	out := readOutput(t, outFile)
	if code != 0 {
		t.Fatalf("sbatch --wait exited %d:\n%s", code, out)
	}
	if !regexp.MustCompile(`(?m)^\[node1 1 r\d+\] .*CRASH on purpose .*attempt=0 code=9$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^gorun: node1 failed .*exited with 9.*; restarting the whole group \(attempt 2 of 2\)$`).MatchString(out) {
		t.Fatalf("no crash of rank 3 on attempt 0 followed by a group restart:\n%s", out)
	}
	c.checkRanks(t, out, 6, 2)
	if n := regexp.MustCompile(`(?m)params-in-sync OK .*attempt=1 restart=1$`).FindAllString(out, -1); len(n) != 6 {
		t.Fatalf("want the 6 ranks of attempt 1 to finish (restart=1), got %d:\n%s", len(n), out)
	}
	// "[node0 0 r0] [node0 rank=0/6 ...] ready attempt=0 ... env SLURM_STEP_ID=4"
	// Each worker names its step, and does not see the agent's own task
	// variables (SLURM_PROCID=0 of a one-task step is not its rank).
	ready := regexp.MustCompile(`(?m)^\[(\S+) \d r\d+\] \[\S+ rank=\d+/6 .*\] ready attempt=(\d) .* env SLURM_PROCID=<unset> SLURM_STEP_ID=(\d+)$`)
	steps := map[string]map[string]bool{} // "attempt node" → step ids
	for _, m := range ready.FindAllStringSubmatch(out, -1) {
		k := m[2] + " " + m[1]
		if steps[k] == nil {
			steps[k] = map[string]bool{}
		}
		steps[k][m[3]] = true
	}
	used := map[string]string{} // step id → "attempt node"
	for _, n := range c.nodes {
		for _, a := range []string{"0", "1"} {
			ids := steps[a+" "+n.name]
			if len(ids) != 1 {
				t.Fatalf("%s attempt %s: the workers' step ids are %v, want one step:\n%s", n.name, a, ids, out)
			}
			for id := range ids {
				if prev, dup := used[id]; dup {
					t.Errorf("step %s ran both %s and attempt %s on %s: want a step per node and attempt", id, prev, a, n.name)
				}
				used[id] = "attempt " + a + " on " + n.name
			}
		}
	}
	c.noneLeft(t, 10*time.Second)
}

// TestSlurmScancel: scancel in the middle of a run stops every step:
// within the margin nothing is left in any node but the cluster's own
// daemons, and Slurm records the job as CANCELLED.
func TestSlurmScancel(t *testing.T) {
	c := needSlurm(t, 3)
	env := c.jobEnv(t, "GORUN_OPTS=--env STEPS=100000 --env STEP_SLEEP=0.1")
	id, outFile, _ := c.submit(t, false, env, "--nodes=3", "slurm/gorun.sbatch")
	deadline := time.Now().Add(slurmJobTimeout)
	running := regexp.MustCompile(`(?m)^\[node2 1 r\d+\] .* step=2 `)
	for {
		b, _ := os.ReadFile(outFile)
		if running.Match(b) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: no training step on node2 after %v:\n%s", id, slurmJobTimeout, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(c.leftovers()) == 0 {
		t.Fatal("the job runs, yet no process of it is seen in the nodes")
	}
	cancel := exec.Command("scancel", id)
	cancel.Env = env
	if out, err := cancel.CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v %s", id, err, out)
	}
	cancelled := time.Now()
	// COMPLETING until every node's slurmd has reported the job's end;
	// read first, as the record is purged MinJobAge (4 s) after the end.
	for {
		state := c.jobState(t, env, id)
		if state == "CANCELLED" {
			break
		}
		if state != "COMPLETING" && state != "RUNNING" || time.Since(cancelled) > 30*time.Second {
			t.Fatalf("job %s: JobState=%s %v after scancel, want CANCELLED", id, state, time.Since(cancelled).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Measured 0.8-3.9 s (the latter at load 13 on the 2-core machine):
	// the batch step and every agent step get SIGTERM, and Slurm SIGKILLs
	// what is left after KillWait (5 s). Asserted at 15 s after scancel.
	const margin = 15 * time.Second
	c.noneLeft(t, margin-time.Since(cancelled))
	t.Logf("every process of the job gone %v after scancel", time.Since(cancelled).Round(100*time.Millisecond))
}

// TestSlurmSrunGorun: `srun gorun` (srun-gorun.sbatch), one gorun per node
// as the node's torchrun, with the torchrun options a job script would
// give: 3 x 2 ranks in sync, through the static rendezvous (node rank from
// SLURM_NODEID: node k holds ranks 2k and 2k+1) and through c10d.
func TestSlurmSrunGorun(t *testing.T) {
	c := needSlurm(t, 3)
	for _, rdzv := range []string{"static", "c10d"} {
		t.Run(rdzv, func(t *testing.T) {
			port := strconv.Itoa(29600 + rand.IntN(300))
			env := c.jobEnv(t, "RDZV="+rdzv, "MASTER_PORT="+port)
			_, outFile, code := c.submit(t, true, env, "--nodes=3", "slurm/srun-gorun.sbatch")
			out := readOutput(t, outFile)
			if code != 0 {
				t.Fatalf("sbatch --wait exited %d:\n%s", code, out)
			}
			rs := c.checkRanks(t, out, 6, 2)
			if rdzv == "static" {
				for _, r := range rs {
					if want := fmt.Sprintf("node%d", r.rank/2); r.host != want {
						t.Errorf("rank %d ran on %s, want %s (node rank = SLURM_NODEID)", r.rank, r.host, want)
					}
				}
			}
			c.noneLeft(t, 10*time.Second)
		})
	}
}

// TestSlurmPreemptRequeue: the preemption pattern of preempt.sbatch, end
// to end. `scancel --signal=USR1 --batch` (what --signal=B:USR1@T sends
// before the time limit) reaches gorun, the batch shell; every one of the
// 6 workers gets SIGUSR1 once and saves its step; rank 0 requeues the job;
// Slurm stops it (SIGTERM) and runs it again, and every rank resumes from
// its checkpoint and finishes.
func TestSlurmPreemptRequeue(t *testing.T) {
	c := needSlurm(t, 3)
	ckpt := t.TempDir()
	if err := os.Chmod(ckpt, 0o777); err != nil {
		t.Fatal(err)
	}
	env := c.jobEnv(t, "CKPT_DIR="+ckpt, "STEPS=150", "TRAIN="+absPath(t, "slurm/preempt_train.py"))
	id, outFile, _ := c.submit(t, false, env, "--nodes=3", "slurm/preempt.sbatch")
	deadline := time.Now().Add(slurmJobTimeout)
	waitOutput(t, outFile, `(?m)rank 5: step=20\b`, slurmJobTimeout) // a training step of rank 5
	warn := exec.Command("scancel", "--signal=USR1", "--batch", id)
	warn.Env = env
	if out, err := warn.CombinedOutput(); err != nil {
		t.Fatalf("scancel --signal=USR1 --batch %s: %v %s", id, err, out)
	}
	waitOutput(t, outFile, `gorun: SIGUSR1 passed to 6 workers on 3 nodes`, slurmJobTimeout)
	// Slurm holds a requeued job back before it may start again (its
	// begin time moves about two minutes on, and again while the job is
	// still completing); the test cluster starts it as soon as it can.
	rerun := regexp.MustCompile(`run 1 of job`)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(outFile); rerun.Match(b) {
			break
		}
		if c.jobState(t, env, id) == "PENDING" {
			up := exec.Command("scontrol", "update", "JobId="+id, "StartTime=now")
			up.Env = env
			_ = up.Run()
		}
		time.Sleep(time.Second)
	}
	out := waitOutput(t, outFile, `(?s)run 1 of job.*(rank \d: done at step 150.*){6}`, slurmJobTimeout) // the requeued run's end
	for rank := range 6 {
		if !regexp.MustCompile(fmt.Sprintf(`rank %d: SIGUSR1: checkpoint saved at step (\d+)`, rank)).MatchString(out) {
			t.Errorf("rank %d saved no checkpoint on SIGUSR1", rank)
		}
		m := regexp.MustCompile(fmt.Sprintf(`rank %d: resumed from step (\d+)`, rank)).FindStringSubmatch(out)
		if m == nil || m[1] == "0" {
			t.Errorf("rank %d did not resume from its checkpoint: %v", rank, m)
		}
	}
	if n := strings.Count(out, ": SIGUSR1: checkpoint saved"); n != 6 {
		t.Errorf("%d checkpoints saved on SIGUSR1, want 6 (each worker once):\n%s", n, out)
	}
	c.noneLeft(t, 30*time.Second)
}

// TestSlurmRequeueOnNodeFault: gorun.sbatch's answer to exit 3. The job's
// second node is marked failing on its first run; gorun's preflight fails
// it and exits 3; the script requeues the job, Slurm allocates it again
// without that node, and the second run succeeds on 2 healthy nodes.
func TestSlurmRequeueOnNodeFault(t *testing.T) {
	mark := marker(t)
	code, out := slurmFailingNode(t, mark)
	if code != 0 {
		t.Fatalf("exit %d, want 0 after the requeue:\n%s", code, out)
	}
	runs := regexp.MustCompile(`(?m)^gorun\.sbatch: run (\d) of job \d+ on (\S+)$`).FindAllStringSubmatch(out, -1)
	if len(runs) != 2 || runs[0][1] != "0" || runs[1][1] != "1" {
		t.Fatalf("want runs 0 and 1 of the job, got %q:\n%s", runs, out)
	}
	for _, w := range []string{"Slurm reports node1 as fail", "gorun.sbatch: exit 3, a node unreachable or unhealthy: requeueing job"} {
		if !strings.Contains(out, w) {
			t.Errorf("the output does not say %q:\n%s", w, out)
		}
	}
	if runs[0][2] != "node[0-1]" || strings.Contains(runs[1][2], "1") {
		t.Errorf("run 0 on %s, run 1 on %s: want node1 left out of the second", runs[0][2], runs[1][2])
	}
	if n := strings.Count(out, "params-in-sync OK"); n != 4 {
		t.Errorf("want 4 ranks to finish on the second run, got %d:\n%s", n, out)
	}
	noneLeft(t, mark, 10*time.Second)
}

// TestSlurmExplicitNProcWins: --nproc-per-node 4 on the command line, in
// an allocation that asked Slurm for 2 tasks per node: 4 workers run on
// each node, and the plan says which counts it did not take.
func TestSlurmExplicitNProcWins(t *testing.T) {
	c := needSlurm(t, 2)
	env := c.jobEnv(t, "GORUN_OPTS=--nproc-per-node 4 --env STEPS=3")
	_, outFile, code := c.submit(t, true, env, "--nodes=2", "--ntasks-per-node=2", "slurm/gorun.sbatch")
	out := readOutput(t, outFile)
	if code != 0 {
		t.Fatalf("sbatch --wait exited %d:\n%s", code, out)
	}
	c.checkRanks(t, out, 8, 4)
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "[warn] --nproc-per-node=4, given on the command line, wins over the slot counts the Slurm allocation gives (node0:2, node1:2)") {
		t.Errorf("no note on the counts not taken:\n%s", out)
	}
	c.noneLeft(t, 10*time.Second)
}
