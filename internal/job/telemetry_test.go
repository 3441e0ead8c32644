package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/launch"
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
// report, an Xid is a finding line, each attempt's nodes and a spare's
// replacement are marked, and the report is written at the end.
func TestGPUWatch(t *testing.T) {
	dir := t.TempDir()
	cl := cmdline.CommandLine{Gorun: cmdline.Options{TelemetryInterval: time.Second,
		Telemetry: filepath.Join(dir, "t.jsonl"), Report: filepath.Join(dir, "r.html")}}
	var diag bytes.Buffer
	g, err := newGPUWatch(cl, []string{"--nproc-per-node", "1", "train.py"}, "preflight: OK", schema.Stamp{}, outputs{}, UI{Err: &diag})
	if err != nil {
		t.Fatal(err)
	}
	plan := envplan.Plan{Nodes: []envplan.NodePlan{{Host: "gpu1", Ranks: []envplan.RankPlan{{Rank: 0, GPU: intp(3)}}}, {Host: "cpu1"}}}
	a := &Attempt{Plan: plan, Nodes: []launch.Node{{Name: "gpu1", Job: wire.Job{}}, {Name: "cpu1"}}}
	g.Shape(a)
	g.Starting(a)
	var cfg telemetry.Config
	if err := json.Unmarshal(a.Nodes[0].Job.Sidecar, &cfg); err != nil || cfg.Interval != time.Second || len(cfg.GPUs) != 1 || cfg.GPUs[0].Index != 3 {
		t.Fatalf("gpu1's sidecar settings = %s (%v)", a.Nodes[0].Job.Sidecar, err)
	}
	notice := frameJSON(t, telemetry.Frame{Notice: "no GPUs to sample: NVML: ERROR_LIBRARY_NOT_FOUND"})
	if msg := g.frame("cpu1", 0, notice); msg != "" {
		t.Errorf("notice said before gpu1 was heard from: %q", msg)
	}
	sm := telemetry.Sample{GPU: 3, Ranks: []int{0}, LocalRanks: []int{0}, Time: time.Now(), ClockReasons: []string{}, Events: []string{"xid 79"}}
	msg := g.frame("gpu1", 0, frameJSON(t, telemetry.Frame{Sample: &sm}))
	if msg != "gorun: cpu1: no GPUs to sample: NVML: ERROR_LIBRARY_NOT_FOUND; GPU telemetry is off there\ngorun: gpu1 gpu3 (rank 0): xid 79 reported by NVML\n" {
		t.Errorf("notice and finding = %q", msg)
	}
	if msg := g.frame("cpu1", 1, notice); msg != "" {
		t.Errorf("notice said again on the next attempt: %q", msg)
	}
	if g.frame("gpu1", 0, []byte("{not json")) != "" {
		t.Error("a bad frame printed something")
	}
	if line := g.statusLine(launch.Counts{Lines: 10}); !strings.HasPrefix(line, "gorun: ") {
		t.Errorf("status = %q", line)
	}
	g.AttemptFailed(0, launch.Failure{Node: "gpu1", Reason: "exit 1"})
	// A spare takes cpu1's place for the restart.
	plan2 := envplan.Plan{Nodes: []envplan.NodePlan{plan.Nodes[0], {Host: "cpu2"}}}
	a = &Attempt{K: 1, Plan: plan2, Nodes: []launch.Node{{Name: "gpu1"}, {Name: "cpu2"}},
		Replaced: []replacement{{left: "cpu1", spare: "cpu2", rank: 1, why: "node.reach failed", attempt: 1}}}
	g.Shape(a)
	g.Starting(a)
	if err := g.Finish(context.Background(), a, launch.Result{Attempts: 2}, nil); err != nil || diag.Len() > 0 {
		t.Errorf("finish: %v, said %q", err, diag.String())
	}
	jl, _ := os.ReadFile(cl.Gorun.Telemetry)
	if !strings.Contains(string(jl), `"node":"gpu1","gpu":3`) || strings.Count(string(jl), "\n") != 1 {
		t.Errorf("JSONL = %s", jl)
	}
	html, _ := os.ReadFile(cl.Gorun.Report)
	for _, want := range []string{"gpu1 gpu3", "xid 79", "attempt 1: gpu1 failed (exit 1)", "cpu1: no GPUs to sample", "preflight: OK", "train.py",
		"attempt 1 starts on gpu1, cpu1", "cpu1 leaves the job (node.reach failed); spare cpu2 takes node rank 1", "attempt 2 starts on gpu1, cpu2"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestNoticesOnceForAll: many nodes with the same notice give one line
// that names them all, as soon as every node has been heard from; a node
// that never answers holds them no longer than noticeWait, and the end
// of the run prints what is still held.
func TestNoticesOnceForAll(t *testing.T) {
	n := notices{nodes: 4, said: map[string]bool{}, heard: map[string]bool{}}
	t0 := time.Now()
	for _, node := range []string{"node1", "node2", "node3"} {
		n.add(node, "no GPUs to sample", t0)
		if got := n.due(t0, false); got != "" {
			t.Fatalf("said before every node was heard: %q", got)
		}
	}
	n.add("node4", "NVML: driver not loaded", t0)
	got := n.due(t0, false)
	want := "gorun: node[1-3] (3 nodes): no GPUs to sample; GPU telemetry is off there\ngorun: node4: NVML: driver not loaded; GPU telemetry is off there\n"
	if got != want {
		t.Errorf("due = %q\nwant %q", got, want)
	}
	if n.add("node1", "no GPUs to sample", t0) || n.due(t0, true) != "" {
		t.Error("a notice said twice")
	}

	late := notices{nodes: 3, said: map[string]bool{}, heard: map[string]bool{}}
	late.add("node1", "x", t0)
	if late.due(t0.Add(noticeWait/2), false) != "" || late.due(t0.Add(noticeWait), false) == "" {
		t.Error("noticeWait not kept")
	}
	late.add("node2", "y", t0)
	if late.due(t0, true) == "" {
		t.Error("forced: nothing said")
	}
}

func TestGPUWatchOff(t *testing.T) {
	g, err := newGPUWatch(cmdline.CommandLine{}, nil, "", schema.Stamp{}, outputs{}, UI{})
	if g != nil || err != nil {
		t.Fatalf("interval 0: %v, %v; want no watch", g, err)
	}
	_, err = newGPUWatch(cmdline.CommandLine{Gorun: cmdline.Options{Report: "r.html"}}, nil, "", schema.Stamp{}, outputs{}, UI{})
	if err == nil {
		t.Error("--report with --telemetry-interval 0 accepted")
	}
}

func TestGPUWatchStatusOnlyLive(t *testing.T) {
	cl := cmdline.CommandLine{Gorun: cmdline.Options{TelemetryInterval: time.Second}}
	g, _ := newGPUWatch(cl, nil, "", schema.Stamp{}, outputs{}, UI{Err: &bytes.Buffer{}})
	var o launch.Options
	g.Configure(&o)
	if o.Telemetry == nil || o.Status != nil || o.StatusOut != nil {
		t.Errorf("off a terminal: telemetry %v, status %v", o.Telemetry != nil, o.Status != nil)
	}
	width := 20
	g, _ = newGPUWatch(cl, nil, "", schema.Stamp{}, outputs{}, UI{Err: &bytes.Buffer{}, Live: true, Width: func() int { return width }})
	o = launch.Options{}
	g.Configure(&o)
	if o.Status == nil || o.StatusOut == nil {
		t.Fatal("live terminal: no status line")
	}
	// The width is read at every redraw.
	first := o.Status(launch.Counts{})
	width = 12
	if second := o.Status(launch.Counts{}); len([]rune(second)) >= len([]rune(first)) || len([]rune(second)) > 11 {
		t.Errorf("after a resize to 12 columns: %q (was %q)", second, first)
	}
}

// TestGPUWatchWriteFailures: the end of a run that cannot write its
// outputs says so and fails; a report is written whole or not at all.
func TestGPUWatchWriteFailures(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "gone")
	os.Mkdir(sub, 0o755)
	cl := cmdline.CommandLine{Gorun: cmdline.Options{TelemetryInterval: time.Second, Report: filepath.Join(sub, "r.html")}}
	g, err := newGPUWatch(cl, nil, "", schema.Stamp{}, outputs{}, UI{Err: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(sub) // the folder went away during the run
	err = g.Finish(context.Background(), &Attempt{}, launch.Result{Attempts: 1}, errors.New("boom"))
	if !errors.Is(err, ErrOutput) || !strings.Contains(err.Error(), "--report") {
		t.Errorf("Finish = %v, want ErrOutput naming --report", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "ok.html"), []byte("whole")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left beside the report: %v", entries)
	}
	if _, err := newGPUWatch(cmdline.CommandLine{Gorun: cmdline.Options{TelemetryInterval: time.Second, Telemetry: sub + "/t.jsonl"}}, nil, "", schema.Stamp{}, outputs{}, UI{}); err == nil {
		t.Error("--telemetry in a missing folder accepted")
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

func TestNodeListInNameOrder(t *testing.T) {
	for _, tc := range []struct {
		nodes []string
		want  string
	}{
		{[]string{"node2", "node0", "node1"}, "node[0-2] (3 nodes)"},
		{[]string{"node10", "node2"}, "node[2,10] (2 nodes)"},
		{[]string{"b", "a"}, "a,b (2 nodes)"},
		{[]string{"node1"}, "node1"},
	} {
		if got := nodeList(tc.nodes); got != tc.want {
			t.Errorf("nodeList(%q) = %q, want %q", tc.nodes, got, tc.want)
		}
	}
}
