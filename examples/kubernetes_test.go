package examples

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Kubernetes manifests are not run on a cluster here (none is at
// hand): they are parsed as YAML (Debian's python3-yaml) and their fields
// checked, and the command each pod runs is given to the real gorun with
// the PET_* variables the operator sets, under --dry-run.

// yamlDocs parses a multi-document YAML file into generic values.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	py := "/usr/bin/python3"
	check := exec.Command(py, "-c", "import yaml")
	need(t, check.Run() == nil, "python3-yaml is not installed")
	out, err := exec.Command(py, "-c",
		"import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))", path).Output()
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var docs []map[string]any
	if err := json.Unmarshal(out, &docs); err != nil {
		t.Fatal(err)
	}
	return docs
}

// at walks a path of map keys and list indexes ("spec", "replicatedJobs", 0, ...).
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for i, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok || m[k] == nil {
				t.Fatalf("no %v at %v", k, path[:i])
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("no [%d] at %v", k, path[:i])
			}
			v = l[k]
		}
	}
	return v
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// stopGrace is --stop-grace in a gorun command (30 s when absent).
func stopGrace(t *testing.T, cmd []string) time.Duration {
	t.Helper()
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, "--stop-grace="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	return 30 * time.Second
}

// checkPodCommand runs a pod's command with the operator's variables under
// --dry-run: gorun must say it runs per pod, as node 1 of 2.
func checkPodCommand(t *testing.T, cmd []string, env []string) {
	t.Helper()
	if cmd[0] != "gorun" {
		t.Fatalf("the pod runs %q, want gorun", cmd[0])
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "train.py"), nil, 0o644)
	args := append([]string{"--dry-run", "--preflight", "off"}, cmd[1:]...)
	c := exec.Command(gorunBin, args...)
	c.Dir = dir
	c.Env = append(append(os.Environ(), env...), "NO_COLOR=1")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun %q: %v\n%s", args, err, out)
	}
	for _, want := range []string{podLinePrefix + "1 of 2", "this plan covers this node only, 8 processes here"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("gorun %q does not say %q:\n%s", args, want, out)
		}
	}
}

func TestKubernetesTrainJob(t *testing.T) {
	docs := yamlDocs(t, "kubernetes/trainjob.yaml")
	if len(docs) != 2 || docs[0]["kind"] != "TrainingRuntime" || docs[1]["kind"] != "TrainJob" {
		t.Fatalf("want a TrainingRuntime and a TrainJob, got %d documents", len(docs))
	}
	rt, job := docs[0], docs[1]
	for _, d := range docs {
		if d["apiVersion"] != "trainer.kubeflow.org/v1alpha1" {
			t.Errorf("%s: apiVersion %v", d["kind"], d["apiVersion"])
		}
	}
	if at(t, job, "spec", "runtimeRef", "name") != at(t, rt, "metadata", "name") ||
		at(t, job, "spec", "runtimeRef", "kind") != "TrainingRuntime" {
		t.Error("the TrainJob does not name the runtime")
	}
	rj := at(t, rt, "spec", "template", "spec", "replicatedJobs", 0)
	if at(t, rj, "name") != "node" || at(t, rj, "template", "metadata", "labels", "trainer.kubeflow.org/trainjob-ancestor-step") != "trainer" {
		t.Error("the replicated job must be Trainer's: name node, ancestor label trainer")
	}
	pod := at(t, rj, "template", "spec", "template", "spec")
	ctr := at(t, pod, "containers", 0)
	if at(t, ctr, "name") != "node" {
		t.Error(`Trainer sets PET_* in the container named "node" only`)
	}
	cmd := strs(t, at(t, ctr, "command"))
	if jobCmd := strs(t, at(t, job, "spec", "trainer", "command")); !slices.Equal(cmd, jobCmd) {
		t.Errorf("the TrainJob's command %q differs from the runtime's %q", jobCmd, cmd)
	}
	grace := time.Duration(at(t, pod, "terminationGracePeriodSeconds").(float64)) * time.Second
	if sg := stopGrace(t, cmd); grace <= sg {
		t.Errorf("terminationGracePeriodSeconds %v is not above --stop-grace %v: the kubelet would SIGKILL before gorun", grace, sg)
	}
	if at(t, pod, "restartPolicy") != "Never" {
		t.Error("podFailurePolicy needs restartPolicy Never")
	}
	rule := at(t, rj, "template", "spec", "podFailurePolicy", "rules", 0)
	if at(t, rule, "action") != "FailJob" || at(t, rule, "onExitCodes", "containerName") != "node" ||
		!slices.Equal(at(t, rule, "onExitCodes", "values").([]any), []any{2.0}) {
		t.Errorf("podFailurePolicy must fail the Job on gorun's exit 2: %v", rule)
	}
	fp := at(t, rt, "spec", "template", "spec", "failurePolicy")
	if at(t, fp, "maxRestarts").(float64) < 1 || at(t, fp, "rules", 0, "action") != "FailJobSet" ||
		at(t, fp, "rules", 0, "onJobFailureReasons", 0) != "PodFailurePolicy" {
		t.Errorf("failurePolicy: %v", fp)
	}
	if _, ok := at(t, job, "spec", "trainer", "resourcesPerNode", "limits").(map[string]any)["nvidia.com/gpu"]; !ok {
		t.Error("no GPU limit per node")
	}
	if env, ok := at(t, job, "spec", "trainer").(map[string]any)["env"]; ok {
		for _, e := range env.([]any) {
			if strings.HasPrefix(at(t, e, "name").(string), "PET_") {
				t.Errorf("Trainer refuses reserved names in env: %v", e)
			}
		}
	}
	checkPodCommand(t, cmd, []string{"PET_NNODES=2", "PET_NPROC_PER_NODE=8", "PET_NODE_RANK=1",
		"PET_MASTER_ADDR=gorun-ddp-node-0-0.gorun-ddp", "PET_MASTER_PORT=29500"})
}

func TestKubernetesPyTorchJob(t *testing.T) {
	docs := yamlDocs(t, "kubernetes/pytorchjob.yaml")
	if len(docs) != 1 || docs[0]["kind"] != "PyTorchJob" || docs[0]["apiVersion"] != "kubeflow.org/v1" {
		t.Fatalf("want one kubeflow.org/v1 PyTorchJob, got %v", docs)
	}
	job := docs[0]
	var cmds [][]string
	for _, role := range []string{"Master", "Worker"} {
		spec := at(t, job, "spec", "pytorchReplicaSpecs", role)
		if at(t, spec, "restartPolicy") != "ExitCode" {
			t.Errorf("%s: restartPolicy %v, want ExitCode", role, at(t, spec, "restartPolicy"))
		}
		pod := at(t, spec, "template", "spec")
		ctr := at(t, pod, "containers", 0)
		if at(t, ctr, "name") != "pytorch" {
			t.Errorf(`%s: the operator sets its variables in the container named "pytorch"`, role)
		}
		cmd := strs(t, at(t, ctr, "command"))
		grace := time.Duration(at(t, pod, "terminationGracePeriodSeconds").(float64)) * time.Second
		if sg := stopGrace(t, cmd); grace <= sg {
			t.Errorf("%s: terminationGracePeriodSeconds %v is not above --stop-grace %v", role, grace, sg)
		}
		cmds = append(cmds, cmd)
	}
	if !slices.Equal(cmds[0], cmds[1]) {
		t.Errorf("Master and Worker run different commands: %q, %q", cmds[0], cmds[1])
	}
	port := at(t, job, "spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "ports", 0)
	if at(t, port, "name") != "pytorchjob-port" {
		t.Error("the Master's port must be named pytorchjob-port (MASTER_PORT comes from it)")
	}
	// The kubelet expands $(MASTER_ADDR) and $(MASTER_PORT) from the
	// container's environment.
	cmd := slices.Clone(cmds[1])
	for i, a := range cmd {
		a = strings.ReplaceAll(a, "$(MASTER_ADDR)", "gorun-ddp-master-0")
		cmd[i] = strings.ReplaceAll(a, "$(MASTER_PORT)", "29500")
	}
	checkPodCommand(t, cmd, []string{"PET_NNODES=2", "PET_NPROC_PER_NODE=8", "PET_NODE_RANK=1",
		"MASTER_ADDR=gorun-ddp-master-0", "MASTER_PORT=29500", "WORLD_SIZE=2", "RANK=1"})
}

// TestKubernetesTrainJobRetries: what trainjob.yaml's policies make of
// gorun's exit codes, read as Kubernetes reads them: the first
// podFailurePolicy rule whose exit codes match acts (FailJob: the Job
// fails with reason PodFailurePolicy); with none, the failure counts
// against backoffLimit (0: the Job fails, BackoffLimitExceeded); then the
// first JobSet failurePolicy rule whose reasons match acts, and with none
// the whole group restarts while maxRestarts lasts. A usage error is the
// pod's own command, run here with a wrong operator variable: exit 2, and
// the JobSet fails at once. A node's fault is 3 (TestExitCodes fails a
// node's preflight over ssh and in a Slurm job; none of a pod's checks can
// fail on this machine without GPUs): the group starts again.
func TestKubernetesTrainJobRetries(t *testing.T) {
	rt := yamlDocs(t, "kubernetes/trainjob.yaml")[0]
	ctr := at(t, rt, "spec", "template", "spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0)
	cmd := strs(t, at(t, ctr, "command"))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "train.py"), nil, 0o644)
	c := exec.Command(gorunBin, cmd[1:]...)
	c.Dir = dir
	c.Env = append(os.Environ(), "PET_NNODES=2", "PET_NPROC_PER_NODE=eight", "PET_NODE_RANK=1",
		"PET_MASTER_ADDR=gorun-ddp-node-0-0.gorun-ddp", "PET_MASTER_PORT=29500", "NO_COLOR=1")
	out, err := c.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "PET_NPROC_PER_NODE") {
		t.Fatalf("the pod's command with PET_NPROC_PER_NODE=eight: %v, want exit 2 naming the variable:\n%s", err, out)
	}
	for code, want := range map[int]string{2: "fails", 3: "restarts", 1: "restarts", 124: "restarts", 143: "restarts"} {
		if got := trainJobFate(t, rt, code); got != want {
			t.Errorf("a pod that exits %d: the JobSet %s, want it %s", code, got, want)
		}
	}
}

// trainJobFate is what a TrainingRuntime's JobSet does when one pod's
// container "node" exits with code: "fails" or "restarts".
func trainJobFate(t *testing.T, rt map[string]any, code int) string {
	spec := at(t, rt, "spec", "template", "spec")
	job := at(t, spec, "replicatedJobs", 0, "template", "spec")
	reason := ""
	for _, r := range at(t, job, "podFailurePolicy", "rules").([]any) {
		oc, ok := r.(map[string]any)["onExitCodes"].(map[string]any)
		if !ok || oc["containerName"] != nil && oc["containerName"] != "node" {
			continue
		}
		in := slices.Contains(oc["values"].([]any), any(float64(code)))
		if oc["operator"] == "NotIn" {
			in = !in
		}
		if !in {
			continue
		}
		switch r.(map[string]any)["action"] {
		case "FailJob":
			reason = "PodFailurePolicy"
		case "Ignore":
			return "restarts"
		}
		break
	}
	if reason == "" {
		if limit, _ := job.(map[string]any)["backoffLimit"].(float64); limit > 0 {
			return "restarts" // the Job itself makes another pod
		}
		reason = "BackoffLimitExceeded"
	}
	fp := at(t, spec, "failurePolicy")
	for _, r := range at(t, fp, "rules").([]any) {
		rule := r.(map[string]any)
		if rs, ok := rule["onJobFailureReasons"].([]any); ok && !slices.Contains(rs, any(reason)) {
			continue
		}
		if rule["action"] == "FailJobSet" {
			return "fails"
		}
		return "restarts"
	}
	if at(t, fp, "maxRestarts").(float64) > 0 {
		return "restarts"
	}
	return "fails"
}
