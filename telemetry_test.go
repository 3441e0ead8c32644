package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTelemetryLocalRun runs the real binary in local mode with a fake
// torchrun: on this CPU machine the agent says once that there is no GPU,
// stderr (a pipe) carries no status line, and both files are written.
func TestTelemetryLocalRun(t *testing.T) {
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("an NVIDIA driver is loaded here: the no-GPU notice would not come")
	}
	s := newSandbox(t)
	write(t, filepath.Join(s.dir, "bin", "torchrun"), "#!/bin/sh\nfor i in 1 2 3; do echo \"[default0]:step $i\"; sleep 0.5; done\n", 0o755)
	r := s.run(t, nil, []string{"--preflight", "off", "--telemetry", "t.jsonl", "--report", "r.html", "--telemetry-interval", "200ms", "train.py"})
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "no GPUs to sample"); n != 1 {
		t.Errorf("the no-GPU notice came %d times, want once:\n%s", n, r.stderr)
	}
	if strings.Contains(r.stderr, "\x1b[") || strings.Contains(r.stderr, "lines/s") {
		t.Errorf("a status line in a pipe:\n%q", r.stderr)
	}
	if !strings.Contains(r.stdout, "step 3") {
		t.Errorf("stdout = %q", r.stdout)
	}
	jl, err := os.ReadFile(filepath.Join(s.dir, "t.jsonl"))
	if err != nil || len(jl) != 0 {
		t.Errorf("JSONL on a CPU machine = %q, %v; want an empty file", jl, err)
	}
	html, err := os.ReadFile(filepath.Join(s.dir, "r.html"))
	if err != nil || !strings.Contains(string(html), "No GPU was sampled") || !strings.Contains(string(html), "attempt 1 starts") {
		t.Errorf("report: %v\n%.500s", err, html)
	}
}
