package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterPods: one gorun per network namespace of the netns cluster,
// as one per pod: no head, no SSH, no Slurm; each is given only the
// variables Kubeflow sets (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
// PET_MASTER_ADDR, PET_MASTER_PORT) and the same argv. The namespaces
// share this machine's host name, which resolves to loopback there (in a
// pod it resolves to the pod's address), so gloo is told its interface.
func TestClusterPods(t *testing.T) {
	c := needCluster(t, 3)
	data, err := os.ReadFile(filepath.Join(c.state, "hosts"))
	if err != nil {
		t.Fatal(err)
	}
	master, _, _ := strings.Cut(strings.TrimSpace(string(data)), " ") // node0's address
	start := func(t *testing.T, mark string, extra ...string) []*run {
		var pods []*run
		for k := range 3 {
			env := append([]string{"PET_NNODES=3", "PET_NODE_RANK=" + strconv.Itoa(k), "PET_NPROC_PER_NODE=2",
				"PET_MASTER_ADDR=" + master, "PET_MASTER_PORT=29500", "GORUN_MARK=" + mark, "GLOO_SOCKET_IFNAME=eth0"}, extra...)
			cmd := exec.Command("ip", "netns", "exec", "gorun-node"+strconv.Itoa(k), gorunBin,
				"--torchrun", shim(t), script(t), "--tag", mark)
			pods = append(pods, startCmd(t, cmd, env))
		}
		return pods
	}
	t.Run("3x2 in sync", func(t *testing.T) {
		mark := marker(t)
		pods := start(t, mark)
		for k, r := range pods {
			if code := r.wait(t, 3*time.Minute); code != 0 {
				t.Fatalf("pod %d: exit %d, want 0:\n%s", k, code, r.output())
			}
		}
		for k, r := range pods {
			out := r.output()
			if n := strings.Count(out, "params-in-sync OK"); n != 2 {
				t.Errorf("pod %d: %d ranks in sync, want 2:\n%s", k, n, out)
			}
			if !strings.Contains(out, podLinePrefix+strconv.Itoa(k)+" of 3 (PET_NODE_RANK)") {
				t.Errorf("pod %d: no per-pod line:\n%s", k, out)
			}
		}
		noneLeft(t, mark, 5*time.Second)
	})
	t.Run("crash on node1", func(t *testing.T) {
		mark := marker(t)
		pods := start(t, mark, "CRASH_RANK=2", "CRASH_CODE=7", "STEPS=50", "STEP_SLEEP=0.1")
		if code := pods[1].wait(t, 3*time.Minute); code != 7 {
			t.Fatalf("pod 1: exit %d, want the worker's 7:\n%s", code, pods[1].output())
		}
		for _, k := range []int{0, 2} {
			if code := pods[k].wait(t, time.Minute); code == 0 {
				t.Errorf("pod %d: exit 0 with node1's worker crashed:\n%s", k, pods[k].output())
			}
		}
		noneLeft(t, mark, 5*time.Second)
	})
	t.Run("SIGTERM to every pod", func(t *testing.T) {
		mark := marker(t)
		pods := start(t, mark, "STEPS=100000", "STEP_SLEEP=0.1")
		for _, r := range pods {
			r.waitLine(t, `step=2 `, 3*time.Minute)
		}
		for _, r := range pods {
			// ip netns exec execs gorun: the pid is gorun's.
			r.cmd.Process.Signal(syscall.SIGTERM)
		}
		for k, r := range pods {
			if code := r.wait(t, 40*time.Second); code != 143 {
				t.Errorf("pod %d: exit %d after SIGTERM, want 143:\n%s", k, code, r.output())
			}
		}
		noneLeft(t, mark, 5*time.Second)
	})
}
