package preflight

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// sampleReport is a healthy GPU node, a GPU node with problems and a CPU
// node asked to run a GPU job.
func sampleReport() Report {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	good := healthyNode()
	good.Host, good.Time = "gpu-a", t0
	bad := healthyNode()
	bad.Host, bad.Hostname, bad.Time = "gpu-b", "gpu-b.cluster", t0.Add(2*time.Second)
	bad.GPUs[1].NVLinks[3].Active = false
	bad.GPUs[0].PCIeWidth = 8
	bad.Torch.Version = "2.5.1+cu124"
	bad.ShmBytes = 64 << 20
	cpu := cpuNode()
	cpu.Host, cpu.Time = "cpu-c", t0
	want := Want{NProc: "2", GPUsRequested: true}
	var nodes []NodeReport
	for _, f := range []Facts{good, bad, cpu} {
		nodes = append(nodes, NodeReport{Host: f.Host, Facts: f, Findings: Check(f, want)})
	}
	return NewReport(nodes, CheckAcross(nodes))
}

func TestReportText(t *testing.T) {
	r := sampleReport()
	if r.OK {
		t.Error("report with fails is OK")
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.txt", b.Bytes())
	// Worst first within each node.
	for _, n := range r.Nodes {
		for i := 1; i < len(n.Findings); i++ {
			if n.Findings[i].Severity.rank() > n.Findings[i-1].Severity.rank() {
				t.Errorf("%s: findings not sorted worst first", n.Host)
			}
		}
	}
}

func TestReportJSON(t *testing.T) {
	r := sampleReport()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json", append(b, '\n'))
	// The shape the head and scripts rely on.
	var shape struct {
		OK    *bool `json:"ok"`
		Nodes []struct {
			Host     string          `json:"host"`
			Facts    json.RawMessage `json:"facts"`
			Findings []map[string]string
		} `json:"nodes"`
		Findings []map[string]string `json:"findings"`
	}
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	if shape.OK == nil || *shape.OK || len(shape.Nodes) != 3 || shape.Nodes[0].Host != "gpu-a" || len(shape.Findings) == 0 {
		t.Fatalf("shape = %+v", shape)
	}
	for _, k := range []string{"id", "severity", "message", "evidence", "remedy"} {
		if _, ok := shape.Nodes[1].Findings[0][k]; !ok {
			t.Errorf("finding lacks %q", k)
		}
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Nodes[1].Facts.GPUs[1].NVLinks[3].Active || back.Nodes[0].Facts.Time != r.Nodes[0].Facts.Time {
		t.Error("facts do not survive a JSON round trip")
	}
}

func TestReportOK(t *testing.T) {
	f := healthyNode()
	r := NewReport([]NodeReport{{Host: "a", Facts: f, Findings: Check(f, Want{NProc: "gpu"})}}, nil)
	if !r.OK {
		t.Errorf("healthy node not OK")
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "preflight: OK (0 fail, 0 warn,") {
		t.Errorf("text = %q", b.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestReportWriteError(t *testing.T) {
	if err := sampleReport().WriteText(failWriter{}); err == nil {
		t.Error("write error lost")
	}
}

// TestNewReportRedacts: whatever a check or a node sends, the report never
// prints a credential: facts from an older gorun, error text quoting a URL
// or an assignment.
func TestNewReportRedacts(t *testing.T) {
	f := healthyNode()
	f.Env = map[string]string{"NCCL_PLUGIN_API_KEY": "s3cr3t-1", "TORCH_HUB_URL": "https://me:s3cr3t-2@hub/x", "NCCL_DEBUG": "INFO"}
	node := NodeReport{Host: "a", Facts: f, Findings: []Finding{{
		ID: "node.reach", Severity: SeverityFail, Message: "cannot collect facts on a",
		Evidence: "fetch https://me:s3cr3t-3@mirror/x: 403; HF_TOKEN=s3cr3t-4", Remedy: "check the node",
	}}}
	across := []Finding{{ID: "x", Severity: SeverityWarn, Message: "m", Evidence: "NCCL_NET_PLUGIN_TOKEN=s3cr3t-5", Remedy: "r"}}
	r := NewReport([]NodeReport{node}, across)
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{text.String(), string(js)} {
		if strings.Contains(out, "s3cr3t") {
			t.Errorf("a secret is shown:\n%s", out)
		}
	}
	if got := r.Nodes[0].Facts.Env["NCCL_DEBUG"]; got != "INFO" {
		t.Errorf("NCCL_DEBUG = %q", got)
	}
	if f.Env["NCCL_PLUGIN_API_KEY"] != "s3cr3t-1" {
		t.Error("NewReport changed the caller's facts")
	}
}

// TestReportFault: a failure of what the job asks or brings makes the
// report's fault "input" (gorun exits 2, never worth a retry), whatever
// else failed; failures of the nodes' health alone make it "node" (exit
// 3, retry on other nodes).
func TestReportFault(t *testing.T) {
	healthy := healthyNode()
	noGPU := Facts{Hostname: "cpu1"}
	missing := healthyNode()
	missing.Torch.TorchrunMissing = "/opt/venv/bin/torchrun: no such file"
	ecc := healthyNode()
	ecc.GPUs[0].RetiredPagesPending = true
	report := func(fs ...Facts) Report {
		var nodes []NodeReport
		for i, f := range fs {
			nodes = append(nodes, NodeReport{Host: string(rune('a' + i)), Facts: f, Findings: Check(f, Want{NProc: "gpu"})})
		}
		return NewReport(nodes, nil)
	}
	for _, tc := range []struct {
		name  string
		nodes []Facts
		want  string
	}{
		{"healthy", []Facts{healthy, healthy}, ""},
		{"GPUs asked of a node with none", []Facts{healthy, noGPU}, "input"},
		{"the named torchrun missing", []Facts{missing}, "input"},
		{"a node's GPU with retired pages pending", []Facts{healthy, ecc}, "node"},
		{"both", []Facts{ecc, missing}, "input"},
	} {
		r := report(tc.nodes...)
		if r.Fault != tc.want || r.OK != (tc.want == "") {
			t.Errorf("%s: fault %q ok %v, want %q", tc.name, r.Fault, r.OK, tc.want)
		}
	}
}
