package examples

import (
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Per-pod tests: two gorun processes on this machine stand for two
// Kubernetes pods, each given only the variables Kubeflow's PyTorchJob and
// Trainer v2 set (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
// PET_MASTER_ADDR, PET_MASTER_PORT) and the same argv.

// freePort is a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// podEnv is what the operator sets in pod rank of a 2-node job, plus the
// test's own variables.
func podEnv(rank, port int, extra ...string) []string {
	return append([]string{"PET_NNODES=2", "PET_NODE_RANK=" + strconv.Itoa(rank), "PET_NPROC_PER_NODE=1",
		"PET_MASTER_ADDR=127.0.0.1", "PET_MASTER_PORT=" + strconv.Itoa(port)}, extra...)
}

// startPods starts node 0 and node 1, each with the same argv.
func startPods(t *testing.T, mark string, extra ...string) [2]*run {
	t.Helper()
	port := freePort(t)
	var pods [2]*run
	for rank := range 2 {
		env := podEnv(rank, port, append([]string{"GORUN_MARK=" + mark}, extra...)...)
		pods[rank] = startGorun(t, env, "--torchrun", shim(t), script(t), "--tag", mark)
	}
	return pods
}

const podLinePrefix = "gorun: runs per pod: torchrun on this node only, as node "

func TestPodPairGlooRun(t *testing.T) {
	needTorch(t)
	mark := marker(t)
	pods := startPods(t, mark)
	for rank, r := range pods {
		if code := r.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("pod %d: exit %d, want 0:\n%s", rank, code, r.output())
		}
	}
	for rank, r := range pods {
		out := r.output()
		t.Logf("pod %d:\n%s", rank, out)
		want := podLinePrefix + strconv.Itoa(rank) + " of 2 (PET_NODE_RANK), master 127.0.0.1:"
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("pod %d: %d lines %q, want 1:\n%s", rank, n, want, out)
		}
		if !strings.Contains(out, "rank="+strconv.Itoa(rank)+"/2 ") || !strings.Contains(out, "params-in-sync OK") {
			t.Errorf("pod %d: rank %d of 2 not in sync:\n%s", rank, rank, out)
		}
	}
	noneLeft(t, mark, 5*time.Second)
}

// TestPodPairWorkerCrash: the worker of node 1 exits 7; node 1's gorun
// exits 7, node 0's fails too (its peer is gone: gloo sees the connection
// close) well within the rendezvous timeout, and nothing is left.
func TestPodPairWorkerCrash(t *testing.T) {
	needTorch(t)
	mark := marker(t)
	pods := startPods(t, mark, "CRASH_RANK=1", "CRASH_CODE=7", "STEPS=50", "STEP_SLEEP=0.1")
	if code := pods[1].wait(t, 3*time.Minute); code != 7 {
		t.Fatalf("pod 1: exit %d, want the worker's 7:\n%s", code, pods[1].output())
	}
	start := time.Now()
	if code := pods[0].wait(t, time.Minute); code == 0 {
		t.Errorf("pod 0: exit 0 with its peer crashed:\n%s", pods[0].output())
	} else {
		t.Logf("pod 0 exited %d, %v after pod 1", code, time.Since(start).Round(time.Millisecond))
	}
	noneLeft(t, mark, 5*time.Second)
}

// TestPodPairSIGTERM: SIGTERM to both pods' gorun, as Kubernetes sends at
// pod deletion: each exits 143 and nothing is left.
func TestPodPairSIGTERM(t *testing.T) {
	needTorch(t)
	mark := marker(t)
	pods := startPods(t, mark, "STEPS=100000", "STEP_SLEEP=0.1")
	for _, r := range pods {
		r.waitLine(t, `step=2 `, 3*time.Minute)
	}
	for _, r := range pods {
		r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for rank, r := range pods {
		if code := r.wait(t, 40*time.Second); code != 143 {
			t.Errorf("pod %d: exit %d after SIGTERM, want 143:\n%s", rank, code, r.output())
		}
	}
	noneLeft(t, mark, 5*time.Second)
}

// TestPodMasterNotListening: node 1 alone, nothing on the master port. Its
// probe gives up after the (shortened) wait with a warning that names the
// address, where it came from and what to check; torchrun starts anyway
// and waits for the store, and SIGTERM then exits 143 with nothing left.
func TestPodMasterNotListening(t *testing.T) {
	needTorch(t)
	mark := marker(t)
	port := freePort(t)
	start := time.Now()
	r := startGorun(t, podEnv(1, port, "GORUN_MARK="+mark, "GORUN_MASTER_TEST_WAIT_S=3"),
		"--torchrun", shim(t), script(t), "--tag", mark)
	r.waitLine(t, `WARN\s+net\.master\s+the master's rendezvous store at 127\.0\.0\.1:`+strconv.Itoa(port)+
		` \(PET_MASTER_ADDR, PET_MASTER_PORT\) did not accept a TCP connection within 3s`, time.Minute)
	took := time.Since(start)
	r.waitLine(t, `remedy:\s+the store opens when node 0's torchrun starts`, 5*time.Second)
	t.Logf("the warning came %v after the start", took.Round(time.Millisecond))
	// Bounded: the wait (3 s) plus this machine's preflight, well under
	// the probe's 60 s default.
	if took < 3*time.Second || took > 45*time.Second {
		t.Errorf("the warning came %v after the start, want after the 3 s wait and within 45 s", took)
	}
	out := r.output()
	if !strings.Contains(out, podLinePrefix+"1 of 2") {
		t.Errorf("no per-pod line:\n%s", out)
	}
	time.Sleep(2 * time.Second) // torchrun is started, waiting for the store
	r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(t, 40*time.Second); code != 143 {
		t.Errorf("exit %d after SIGTERM, want 143:\n%s", code, r.output())
	}
	noneLeft(t, mark, 5*time.Second)
}
