package examples

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// goodputJob prints a step every 0.2 s, saves a checkpoint at step 10,
// crashes at step 15 on the first attempt; on the second it runs to step
// 30 and hangs. Rank 0 writes what it did, with its own clock, to
// $GOODPUT_LOG: the schedule the summary must match.
const goodputJob = `import os, sys, time
k = int(os.environ["TORCHELASTIC_RESTART_COUNT"]); rank = int(os.environ["RANK"])
log = open(os.environ["GOODPUT_LOG"], "a") if rank == 0 else None
def mark(what):
    if log: log.write("%d %s %.3f\n" % (k, what, time.time())); log.flush()
for step in range(1, 31):
    time.sleep(0.2)
    print("step %d loss 0.5" % step, flush=True)
    if step == 1: mark("first")
    mark("step")
    if step == 10:
        if os.environ.get("CHECKPOINT_BY") == "touch":
            import pathlib; pathlib.Path(os.environ["GORUN_CHECKPOINT_FILE"]).touch()
        else:
            print("checkpoint saved to ckpt/step_10", flush=True)
        mark("checkpoint")
    if k == 0 and step == 15:
        mark("crash"); sys.exit(7)
mark("hang")
time.sleep(3600)
`

// TestGoodputE2E: a real run with real torchrun: the summary's goodput
// breakdown matches the job's own schedule (its clock, written as it
// ran) within 0.5 s per part, the parts add up to the wall time, and the
// end line says it. The checkpoint is said by a line, or by a touch of
// $GORUN_CHECKPOINT_FILE.
func TestGoodputE2E(t *testing.T) {
	needTorch(t)
	for _, by := range []string{"line", "touch"} {
		t.Run(by, func(t *testing.T) { goodputE2E(t, by, []string{"--nproc-per-node", "2"}, 1) })
	}
}

// TestClusterGoodput: TestGoodputE2E over ssh on two nodes of the netns
// cluster, one rank each: the same parts within the same margins, and a
// band in the report for each node and attempt.
func TestClusterGoodput(t *testing.T) {
	c := needCluster(t, 2)
	goodputE2E(t, "line", append(c.sshArgs(), "--hosts", c.hostsFlag(1), "--nproc-per-node", "1"), 2)
}

// goodputE2E runs goodputJob with gorun's args (where it runs), the
// checkpoint said by a line or a touch, on nodes nodes.
func goodputE2E(t *testing.T, checkpointBy string, where []string, nodes int) {
	dir := t.TempDir()
	job, logf, sum, report := filepath.Join(dir, "job.py"), filepath.Join(dir, "schedule.log"), filepath.Join(dir, "s.json"), filepath.Join(dir, "r.html")
	if err := os.WriteFile(job, []byte(goodputJob), 0o644); err != nil {
		t.Fatal(err)
	}
	mark := marker(t)
	start := time.Now()
	args := append(slices.Clone(where), "--torchrun", shim(t), "--env", "GOODPUT_LOG="+logf, "--env", "CHECKPOINT_BY="+checkpointBy,
		"--max-restarts", "1", "--hang-timeout", "5s", "--summary", sum, "--report", report, job, "--tag", mark)
	r := startGorun(t, []string{"GORUN_MARK=" + mark}, args...)
	if code := r.wait(t, 3*time.Minute); code != 124 {
		t.Fatalf("exit %d, want 124 (the hang):\n%s", code, r.output())
	}
	end := time.Now()
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Goodput struct {
			Known            bool    `json:"known"`
			WallSeconds      float64 `json:"wall_seconds"`
			CheckpointsKnown bool    `json:"checkpoints_known"`
			Parts            []struct {
				Key     string  `json:"key"`
				Seconds float64 `json:"seconds"`
			} `json:"parts"`
		} `json:"goodput"`
	}
	if err := json.Unmarshal(b, &s); err != nil || !s.Goodput.Known || !s.Goodput.CheckpointsKnown {
		t.Fatalf("summary's goodput: %v\n%s", err, b)
	}
	got := map[string]float64{}
	total := 0.0
	for _, p := range s.Goodput.Parts {
		got[p.Key] = p.Seconds
		total += p.Seconds
	}
	// The job's schedule, by its own clock.
	sched := map[string]float64{}
	raw, _ := os.ReadFile(logf)
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		at, _ := strconv.ParseFloat(f[2], 64)
		key := f[0] + " " + f[1]
		if f[1] == "step" { // the last one wins
			sched[key] = at
		} else if _, ok := sched[key]; !ok {
			sched[key] = at
		}
	}
	for _, k := range []string{"0 first", "0 checkpoint", "0 crash", "1 first", "1 step", "1 hang"} {
		if sched[k] == 0 {
			t.Fatalf("the job's log lacks %q:\n%s", k, raw)
		}
	}
	want := map[string]float64{
		"productive":    (sched["0 checkpoint"] - sched["0 first"]) + (sched["1 step"] - sched["1 first"]),
		"lost_progress": sched["0 crash"] - sched["0 checkpoint"],
		"hang":          5, // --hang-timeout: no step after the last one
	}
	for k, w := range want {
		margin := 0.5
		if k == "hang" {
			margin = 1.5 // the limit plus the silence clock's tick and the stacks asked of every rank
		}
		if math.Abs(got[k]-w) > margin {
			t.Errorf("%s: %.2f s, the job's schedule says %.2f s (margin %.1f s)", k, got[k], w, margin)
		}
	}
	if wall := end.Sub(start).Seconds(); math.Abs(s.Goodput.WallSeconds-wall) > 1 || math.Abs(total-s.Goodput.WallSeconds) > 0.01 {
		t.Errorf("wall %.2f s (the test saw %.2f s), parts add up to %.2f s", s.Goodput.WallSeconds, wall, total)
	}
	for _, k := range []string{"preflight", "startup", "restart"} {
		if got[k] <= 0 {
			t.Errorf("no %s part: %v", k, got)
		}
	}
	if html, err := os.ReadFile(report); err != nil || strings.Count(string(html), `<polygon class="band"`) != 2*nodes {
		t.Errorf("the report's step chart: %v, want a band for each attempt on each of %d nodes", err, nodes)
	}
	if !strings.Contains(r.output(), "gorun: goodput ") {
		t.Errorf("no goodput line at the end:\n%s", r.output())
	}
	t.Logf("goodput parts: %v; the job's schedule: %v", got, want)
}

// TestStragglerFromSteps: on CPU (no GPU telemetry to go on), a rank whose
// steps take twice the others' is named, with its ratio (1.7-2.3x); in a
// balanced run no rank is.
func TestStragglerFromSteps(t *testing.T) {
	needTorch(t)
	stragglerFromSteps(t, []string{"--nproc-per-node", "3"}, "localhost")
}

// TestClusterStraggler: TestStragglerFromSteps over ssh, on three CPU
// nodes of the netns cluster with a rank each: rank 1, on the second
// node, is named with its node.
func TestClusterStraggler(t *testing.T) {
	c := needCluster(t, 3)
	stragglerFromSteps(t, append(c.sshArgs(), "--hosts", c.hostsFlag(1), "--nproc-per-node", "1"), c.nodes[1])
}

// stragglerFromSteps runs a job whose rank 1 steps at half the others'
// pace, and a balanced one, with gorun's args (where it runs); rank 1 is
// on node.
func stragglerFromSteps(t *testing.T, where []string, node string) {
	job := filepath.Join(t.TempDir(), "job.py")
	if err := os.WriteFile(job, []byte(`import os, time
rank, slow = int(os.environ["RANK"]), int(os.environ.get("SLOW_RANK", "-1"))
for step in range(1, 31):
    time.sleep(0.1 * (2 if rank == slow else 1))
    print("step", step, flush=True)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, slow := range []string{"1", "-1"} {
		mark := marker(t)
		args := append(slices.Clone(where), "--torchrun", shim(t), "--env", "SLOW_RANK="+slow, job, "--tag", mark)
		r := startGorun(t, []string{"GORUN_MARK=" + mark}, args...)
		if code := r.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("exit %d:\n%s", code, r.output())
		}
		out := r.output()
		m := regexp.MustCompile(`gorun: straggler: (\S+) rank (\d+) \(attempt 1\): step time \d+ ms \(median\), ([\d.]+)x`).FindAllStringSubmatch(out, -1)
		if slow == "-1" {
			if len(m) != 0 {
				t.Errorf("a balanced run named stragglers:\n%s", out)
			}
			continue
		}
		if len(m) != 1 || m[0][1] != node || m[0][2] != "1" {
			t.Fatalf("want rank 1 named alone, on %s:\n%s", node, out)
		}
		if ratio, _ := strconv.ParseFloat(m[0][3], 64); ratio < 1.7 || ratio > 2.3 {
			t.Errorf("rank 1 at %.2fx, want 2x within 0.3", ratio)
		}
	}
}
