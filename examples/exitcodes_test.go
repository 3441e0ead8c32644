package examples

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitCodes is README's "Exit codes" table, a row each, met the way a
// scheduler meets it: on this machine, over ssh on the netns cluster, and
// in a Slurm job. A row that started nothing must leave nothing of its run
// (checked by its marker across every namespace). One row is elsewhere:
// 3 for a node that fails its checks before a restart with no --nnodes
// range to go on without it is TestClusterElasticShrink's "no range".
func TestExitCodes(t *testing.T) {
	needTorch(t)
	local := func(env []string, args ...string) func(t *testing.T, mark string) (int, string) {
		return func(t *testing.T, mark string) (int, string) {
			r := startGorun(t, append(env, "GORUN_MARK="+mark), append(args, "--tag", mark)...)
			return r.wait(t, 3*time.Minute), r.output()
		}
	}
	train := func(more ...string) []string {
		return append(append([]string{"--torchrun", shim(t), "--nproc-per-node", "2"}, more...), script(t))
	}
	for _, tc := range []struct {
		name    string
		code    int
		started bool     // whether the row starts workers
		want    []string // in the output
		run     func(t *testing.T, mark string) (int, string)
	}{
		{name: "0 every worker succeeded", code: 0, started: true, want: []string{"params-in-sync OK"},
			run: local([]string{"STEPS=3"}, train()...)},
		{name: "N the failing worker's own code", code: 7, started: true, want: []string{"exited with 7"},
			run: local([]string{"CRASH_RANK=1", "CRASH_ON_ATTEMPT=0", "CRASH_CODE=7"}, train()...)},
		{name: "2 bad input", code: 2, want: []string{"--nnodes"},
			run: local(nil, train("--nnodes", "2:20:30")...)},
		{name: "2 preflight: the --torchrun command is not on the node", code: 2, want: []string{"torch.torchrun", "/nonexistent/bin/torchrun"},
			run: local(nil, "--torchrun", "/nonexistent/bin/torchrun", "--nproc-per-node", "2", script(t))},
		{name: "2 preflight: GPUs asked of a node with none", code: 2, want: []string{"driver.present"},
			run: local(nil, "--torchrun", shim(t), "--nproc-per-node", "gpu", script(t))},
		{name: "2 the working directory deleted", code: 2, want: []string{"the working directory", "deleted"},
			run: func(t *testing.T, mark string) (int, string) {
				gone := filepath.Join(t.TempDir(), "gone")
				if err := os.Mkdir(gone, 0o755); err != nil {
					t.Fatal(err)
				}
				// The shell enters it, removes it, then runs gorun there.
				cmd := exec.Command("sh", "-c", `cd "$1" && rmdir "$1" && shift && exec "$@"`, "sh", gone,
					gorunBin, "--torchrun", shim(t), "--nproc-per-node", "2", script(t), "--tag", mark)
				r := startCmd(t, cmd, []string{"GORUN_MARK=" + mark})
				return r.wait(t, time.Minute), r.output()
			}},
		{name: "3 a node unreachable (ssh)", code: 3, want: []string{"cannot reach every node", "10.77.0.250"},
			run: func(t *testing.T, mark string) (int, string) {
				c := needCluster(t, 2)
				sum := filepath.Join(t.TempDir(), "s.json")
				code, out := local(nil, append(c.sshArgs(), "--hosts", c.nodes[0]+":1,10.77.0.250:1", "--torchrun", shim(t), "--summary", sum, script(t))...)(t, mark)
				refusedSummary(t, sum, 3, "10.77.0.250")
				return code, out
			}},
		{name: "3 preflight: a node's network (ssh)", code: 3, want: []string{"net.route", "node1", "preflight failed; nothing was started"},
			run: func(t *testing.T, mark string) (int, string) {
				c := needCluster(t, 2)
				noRouteToNode0(t, c, 1)
				sum := filepath.Join(t.TempDir(), "s.json")
				code, out := local(nil, append(c.sshArgs(), "--hosts", c.hostsFlag(1), "--torchrun", shim(t), "--summary", sum, script(t))...)(t, mark)
				refusedSummary(t, sum, 3, c.nodes[1])
				return code, out
			}},
		{name: "3 preflight: a node Slurm marks failing (Slurm job)", code: 3, want: []string{"slurm.node.state", "Slurm reports node1 as fail", "preflight failed; nothing was started"},
			run: func(t *testing.T, mark string) (int, string) { return slurmFailingNode(t, mark, "REQUEUE_MAX=0") }},
		{name: "124 a hang", code: 124, started: true, want: []string{"gorun: hang: stuck:"},
			run: local([]string{"HANG_RANK=1"}, "--torchrun", shim(t), "--nproc-per-node", "2", "--hang-timeout", "5s", hangScript(t))},
		{name: "143 SIGTERM from outside", code: 143, started: true,
			run: func(t *testing.T, mark string) (int, string) {
				r := startGorun(t, []string{"GORUN_MARK=" + mark, "STEPS=100000", "STEP_SLEEP=0.1"}, append(train(), "--tag", mark)...)
				r.waitLine(t, `step=2 `, 2*time.Minute)
				r.cmd.Process.Signal(syscall.SIGTERM)
				return r.wait(t, time.Minute), r.output()
			}},
		{name: "1 the job ran but --summary could not be written", code: 1, started: true, want: []string{"--summary"},
			run: func(t *testing.T, mark string) (int, string) {
				dir := filepath.Join(t.TempDir(), "gone")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				r := startGorun(t, []string{"GORUN_MARK=" + mark, "STEPS=30", "STEP_SLEEP=0.1"},
					append(train("--summary", filepath.Join(dir, "run.json")), "--tag", mark)...)
				r.waitLine(t, `step=2 `, 2*time.Minute)
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				return r.wait(t, 2*time.Minute), r.output()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := marker(t)
			code, out := tc.run(t, mark)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the output does not say %q:\n%s", w, out)
				}
			}
			if !tc.started && strings.Contains(out, "ready attempt=") {
				t.Errorf("a worker ran:\n%s", out)
			}
			noneLeft(t, mark, 10*time.Second)
		})
	}
}

// noRouteToNode0 makes node i of c refuse every packet to node0's address
// (a "prohibit" route in its namespace) until t ends: its network, not the
// job, is at fault.
func noRouteToNode0(t *testing.T, c cluster, i int) {
	t.Helper()
	data, _ := os.ReadFile(filepath.Join(c.state, "hosts"))
	node0, _, _ := strings.Cut(string(data), " ") // "10.77.0.10 node0" first
	ns := fmt.Sprintf("gorun-node%d", i)
	if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "route", "add", "prohibit", node0+"/32").CombinedOutput(); err != nil {
		t.Fatalf("%s: no route to %s: %v %s", ns, node0, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "exec", ns, "ip", "route", "del", "prohibit", node0+"/32").Run() })
}

// slurmFailingNode runs slurm/gorun.sbatch in a 2-node Slurm job whose
// second node is marked FAIL (Slurm's word that the node is about to fail)
// on the job's first run, before gorun starts: preflight fails that node,
// and gorun.sbatch ends with gorun's 3. With REQUEUE_MAX=0 it stops there;
// else it requeues (TestSlurmRequeueOnNodeFault).
func slurmFailingNode(t *testing.T, mark string, env ...string) (int, string) {
	c := needSlurm(t, 3)
	batch := filepath.Join(t.TempDir(), "failing.sbatch")
	if err := os.WriteFile(batch, []byte(`#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  last=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -1)
  scontrol update nodename="$last" state=fail reason="gorun exit-code test"
fi
exec bash "$GORUN_SBATCH" "$@"
`), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range c.all {
			s := exec.Command("scontrol", "update", "nodename="+n.name, "state=resume")
			s.Env = c.jobEnv(t)
			_ = s.Run() // a node not failing says so, and stays as it is
		}
	})
	env = append(env, "GORUN_SBATCH="+absPath(t, "slurm/gorun.sbatch"), "GORUN_OPTS=--env STEPS=3")
	// Slurm holds a requeued batch job for 2 minutes (its EligibleTime);
	// the test cluster's jobs are the tests', so any held for that is let go.
	done, qenv := make(chan struct{}), c.jobEnv(t)
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			q := exec.Command("squeue", "-h", "-t", "PD", "-o", "%i %r")
			q.Env = qenv
			out, _ := q.Output()
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if id, reason, _ := strings.Cut(line, " "); reason == "BeginTime" {
					u := exec.Command("scontrol", "update", "jobid="+id, "starttime=now")
					u.Env = qenv
					_ = u.Run()
				}
			}
		}
	}()
	_, outFile, code := c.submit(t, true, c.jobEnv(t, env...), "--nodes=2", "--ntasks-per-node=2", "--requeue", "--open-mode=append", batch, "--tag", mark)
	return code, readOutput(t, outFile)
}

// refusedSummary fails t unless the --summary at path is a refused run's,
// exiting code, with node the only one at fault: what a scheduler reads.
func refusedSummary(t *testing.T, path string, code int, node string) {
	t.Helper()
	b, err := os.ReadFile(path)
	var s struct {
		Outcome      string   `json:"outcome"`
		ExitCode     *int     `json:"exit_code"`
		NodesAtFault []string `json:"nodes_at_fault"`
	}
	if err != nil || json.Unmarshal(b, &s) != nil || s.Outcome != "refused" || s.ExitCode == nil || *s.ExitCode != code ||
		len(s.NodesAtFault) != 1 || s.NodesAtFault[0] != node {
		t.Errorf("--summary of the refused run: %v, want %d and %s at fault\n%s", err, code, node, b)
	}
}
