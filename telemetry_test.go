package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/sshexec"
	"github.com/gorun/gorun/telemetry"
)

func intp(i int) *int { return &i }

func TestPlanGPUs(t *testing.T) {
	tests := []struct {
		name  string
		ranks []envplan.RankPlan
		want  []telemetry.GPU
	}{
		{"one rank per GPU", []envplan.RankPlan{{Rank: 8, LocalRank: 0, GPU: intp(1)}, {Rank: 9, LocalRank: 1, GPU: intp(0)}},
			[]telemetry.GPU{{Index: 0, Ranks: []int{9}, LocalRanks: []int{1}}, {Index: 1, Ranks: []int{8}, LocalRanks: []int{0}}}},
		{"two ranks share a GPU", []envplan.RankPlan{{Rank: 0, LocalRank: 0, GPU: intp(0)}, {Rank: 1, LocalRank: 1, GPU: intp(0)}},
			[]telemetry.GPU{{Index: 0, Ranks: []int{0, 1}, LocalRanks: []int{0, 1}}}},
		{"a GPU unknown: every GPU", []envplan.RankPlan{{Rank: 0, GPU: intp(0)}, {Rank: 1, LocalRank: 1}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planGPUs(envplan.NodePlan{Ranks: tt.ranks})
			if len(got) == 0 && len(tt.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("planGPUs = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func frameJSON(t *testing.T, f telemetry.Frame) []byte {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGPUWatch: settings reach each node's job, a CPU node's notice is
// printed once across attempts, samples land in the JSONL file and the
// report, an Xid is a finding line, and the report is written at the end.
func TestGPUWatch(t *testing.T) {
	dir := t.TempDir()
	cl := cmdline.CommandLine{Gorun: cmdline.Options{TelemetryInterval: time.Second,
		Telemetry: filepath.Join(dir, "t.jsonl"), Report: filepath.Join(dir, "r.html")}}
	g, err := newGPUWatch(cl, []string{"--nproc-per-node", "1", "train.py"}, "preflight: OK")
	if err != nil {
		t.Fatal(err)
	}
	plan := envplan.Plan{Nodes: []envplan.NodePlan{{Host: "gpu1", Ranks: []envplan.RankPlan{{Rank: 0, GPU: intp(3)}}}, {Host: "cpu1"}}}
	nodes := g.attach(plan, 0, []launch.Node{{Name: "gpu1", Job: sshexec.Job{}}, {Name: "cpu1"}})
	var cfg telemetry.Config
	if err := json.Unmarshal(nodes[0].Job.Sidecar, &cfg); err != nil || cfg.Interval != time.Second || len(cfg.GPUs) != 1 || cfg.GPUs[0].Index != 3 {
		t.Fatalf("gpu1's sidecar settings = %s (%v)", nodes[0].Job.Sidecar, err)
	}
	notice := frameJSON(t, telemetry.Frame{Notice: "no GPUs to sample: NVML: ERROR_LIBRARY_NOT_FOUND"})
	if msg := g.frame("cpu1", 0, notice); !strings.HasPrefix(msg, "gorun: cpu1: no GPUs to sample") {
		t.Errorf("notice = %q", msg)
	}
	if msg := g.frame("cpu1", 1, notice); msg != "" {
		t.Errorf("notice said again on the next attempt: %q", msg)
	}
	sm := telemetry.Sample{GPU: 3, Ranks: []int{0}, LocalRanks: []int{0}, Time: time.Now(), ClockReasons: []string{}, Events: []string{"xid 79"}}
	if msg := g.frame("gpu1", 0, frameJSON(t, telemetry.Frame{Sample: &sm})); msg != "gorun: gpu1 gpu3 (rank 0): xid 79 reported by NVML\n" {
		t.Errorf("finding = %q", msg)
	}
	if line := g.statusLine(10); !strings.HasPrefix(line, "gorun: ") {
		t.Errorf("status = %q", line)
	}
	g.failed(0, launch.Failure{Node: "gpu1", Reason: "exit 1"})
	var diag strings.Builder
	g.finish(launch.Result{Attempts: 1}, nil, &diag)
	if diag.Len() > 0 {
		t.Errorf("finish said %q", diag.String())
	}
	jl, _ := os.ReadFile(cl.Gorun.Telemetry)
	if !strings.Contains(string(jl), `"node":"gpu1","gpu":3`) || strings.Count(string(jl), "\n") != 1 {
		t.Errorf("JSONL = %s", jl)
	}
	html, _ := os.ReadFile(cl.Gorun.Report)
	for _, want := range []string{"gpu1 gpu3", "xid 79", "attempt 1: gpu1 failed (exit 1)", "cpu1: no GPUs to sample", "preflight: OK", "train.py"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestGPUWatchOff(t *testing.T) {
	g, err := newGPUWatch(cmdline.CommandLine{}, nil, "")
	if g != nil || err != nil {
		t.Fatalf("interval 0: %v, %v; want no watch", g, err)
	}
	// A nil watch is inert.
	nodes := g.attach(envplan.Plan{}, 0, []launch.Node{{Name: "n"}})
	if nodes[0].Job.Sidecar != nil {
		t.Error("settings without telemetry")
	}
	var o launch.Options
	g.options(&o, os.Stderr)
	if o.Telemetry != nil || o.Status != nil {
		t.Error("options set without telemetry")
	}
	_, err = newGPUWatch(cmdline.CommandLine{Gorun: cmdline.Options{Report: "r.html"}}, nil, "")
	if err == nil {
		t.Error("--report with --telemetry-interval 0 accepted")
	}
}

// TestTelemetryLocalRun runs the real binary in local mode with a fake
// torchrun: on this CPU machine the agent says once that there is no GPU,
// stderr (a pipe) carries no status line, and both files are written.
func TestTelemetryLocalRun(t *testing.T) {
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("an NVIDIA driver is loaded here: the no-GPU notice would not come")
	}
	s := newSandbox(t)
	write(t, filepath.Join(s.dir, "bin", "torchrun"), "#!/bin/sh\nfor i in 1 2 3; do echo \"[default0]:step $i\"; sleep 0.5; done\n", 0o755)
	r := s.run(t, nil, []string{"--preflight", "off", "--telemetry", "t.jsonl", "--report", "r.html", "--telemetry-interval", "200ms", "train.py"}, nil, 0)
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

func TestGPUWatchNoStatusOffTerminal(t *testing.T) {
	g, err := newGPUWatch(cmdline.CommandLine{Gorun: cmdline.Options{TelemetryInterval: time.Second}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var o launch.Options
	var buf strings.Builder
	g.options(&o, &buf)
	if o.Telemetry == nil || o.Status != nil || o.StatusOut != nil {
		t.Errorf("off a terminal: telemetry %v, status %v", o.Telemetry != nil, o.Status != nil)
	}
}

func TestFitWidth(t *testing.T) {
	tests := []struct {
		line  string
		width int
		want  string
	}{
		{"gorun: 5 lines/s", 0, "gorun: 5 lines/s"},
		{"gorun: 5 lines/s", 80, "gorun: 5 lines/s"},
		{"gorun: 5 lines/s", 16, "gorun: 5 lines…"}, // 15 columns: one short of the width
		{"gorun: 5 lines/s", 17, "gorun: 5 lines/s"},
	}
	for _, tt := range tests {
		if got := fitWidth(tt.line, tt.width); got != tt.want {
			t.Errorf("fitWidth(%q, %d) = %q, want %q", tt.line, tt.width, got, tt.want)
		}
	}
}
