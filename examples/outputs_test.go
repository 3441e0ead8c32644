package examples

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Secrets as a user's job carries them: one in --env (a credential's
// name), one in the environment gorun starts in, one in the training
// script's arguments (a token's shape).
const (
	envFlagSecret  = "hf-env-flag-value-3141592653"
	environSecret  = "aws-environ-value-2718281828"
	scriptArgToken = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm0123456789"
)

// TestOutputsMatchSchemas runs gorun as a user would, with a secret in
// each place a job carries one, and reads every output it writes: the
// summary, the telemetry lines, the report, the console, `gorun preflight
// --json`, `gorun preflight --topo-file --json` and `gorun hosts --json`.
// Each is valid against its published schema (docs/schema/, checked by
// Python's jsonschema, not by the code that wrote them), opens with its
// stamp, and holds no secret. This machine has no GPU, so its telemetry
// file is empty: the lines validated are those a run on the GPU machine
// kept (docs/device/*/outputs/).
func TestOutputsMatchSchemas(t *testing.T) {
	needTorch(t)
	py := "/usr/bin/python3"
	need(t, exec.Command(py, "-c", "import jsonschema").Run() == nil, "python3-jsonschema is not installed")
	dir := t.TempDir()
	mark := marker(t)
	env := []string{"GORUN_MARK=" + mark, "STEPS=3", "AWS_SECRET_ACCESS_KEY=" + environSecret, "SLURM_JOB_ID=4242"}
	r := startGorun(t, env, "--torchrun", shim(t), "--nproc-per-node", "2", "--env", "HF_TOKEN="+envFlagSecret,
		"--summary", filepath.Join(dir, "s.json"), "--telemetry", filepath.Join(dir, "t.jsonl"), "--report", filepath.Join(dir, "r.html"),
		script(t), "--tag", mark, "--hub-token", scriptArgToken)
	if code := r.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, r.output())
	}
	noneLeft(t, mark, 5*time.Second)
	files := map[string][]byte{"console": []byte(r.output())}
	for _, f := range []string{"s.json", "t.jsonl", "r.html"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = b
	}
	sub := func(args ...string) []byte {
		c := exec.Command(gorunBin, args...)
		c.Env = append(os.Environ(), "AWS_SECRET_ACCESS_KEY="+environSecret, "HF_TOKEN="+envFlagSecret, "SLURM_JOB_ID=4242", "NO_COLOR=1")
		out, err := c.Output()
		if err != nil {
			t.Fatalf("gorun %q: %v\n%s", args, err, out)
		}
		return out
	}
	files["preflight.json"] = sub("preflight", "--json", "--torchrun", shim(t), "--env", "HF_TOKEN", script(t), "--hub-token", scriptArgToken)
	files["topology.json"] = sub("preflight", "--topo-file", absPath(t, "../preflight/testdata/topo/asymmetric.txt"), "--json")
	files["hosts.json"] = sub("hosts", "--hosts", "gpu[01-02]:8,cpu1:2", "--json")

	for name, b := range files {
		for _, s := range []string{envFlagSecret, environSecret, scriptArgToken} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a secret (%.12s...)", name, s)
			}
		}
	}
	validate := func(name, format string, doc []byte) {
		t.Helper()
		schemaPath := absPath(t, "../docs/schema/"+strings.ReplaceAll(format, "/", "-")+".json")
		c := exec.Command(py, "-c", `import json, sys, jsonschema
s = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(s)
jsonschema.Draft202012Validator(s).validate(json.load(sys.stdin))`, schemaPath)
		c.Stdin = bytes.NewReader(doc)
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("%s is not valid %s: %v\n%s", name, format, err, out)
		}
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m["schema"] != format || m["gorun_version"] == "" || m["slurm_job_id"] != "4242" {
			t.Errorf("%s: schema %v, gorun_version %v, slurm_job_id %v; want %s, a version, 4242", name, m["schema"], m["gorun_version"], m["slurm_job_id"], format)
		}
	}
	validate("--summary", "gorun.summary/1", files["s.json"])
	validate("preflight --json", "gorun.preflight/1", files["preflight.json"])
	validate("preflight --topo-file --json", "gorun.topology/1", files["topology.json"])
	validate("hosts --json", "gorun.hosts/1", files["hosts.json"])
	if len(files["t.jsonl"]) != 0 {
		t.Errorf("telemetry lines on a machine without GPUs:\n%.300s", files["t.jsonl"])
	}
	// The lines a GPU machine wrote (docs/device/*/outputs/), where a run
	// there kept them; the writer's lines from the sampler are validated
	// on every run by telemetry's TestJSONLMatchesPublishedSchema.
	kept, _ := filepath.Glob(absPath(t, "../docs/device") + "/*/outputs/telemetry.jsonl")
	for _, device := range kept {
		b, err := os.ReadFile(device)
		if err != nil {
			t.Fatal(err)
		}
		sc, n := bufio.NewScanner(bytes.NewReader(b)), 0
		for sc.Scan() && n < 5 { // the same shape on every line
			n++
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s line %d: %v", device, n, err)
			}
			m["slurm_job_id"] = "4242" // the GPU machine ran no Slurm job
			line, _ := json.Marshal(m)
			validate(device+" line", "gorun.telemetry/1", line)
		}
		if n == 0 {
			t.Errorf("%s has no line", device)
		}
	}
}
