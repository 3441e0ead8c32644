package examples

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestClusterBandwidthSlowNode: `gorun preflight --bandwidth all` on three
// CPU nodes measures all_reduce (gloo) per node pair around the ring and,
// with node2's link held to 100 Mbit/s by tc tbf (netem is not in every
// kernel), names node2 and only node2 as slow. The veth is the cluster's
// PREFIX (GORUN_TESTCLUSTER_PREFIX, default gorun) + "-v2".
func TestClusterBandwidthSlowNode(t *testing.T) {
	c := needCluster(t, 3)
	prefix := os.Getenv("GORUN_TESTCLUSTER_PREFIX")
	if prefix == "" {
		prefix = "gorun"
	}
	veth := prefix + "-v2"
	type report struct {
		OK       bool `json:"ok"`
		Findings []struct {
			ID, Severity, Message, Evidence string
		} `json:"findings"`
		Cross []struct {
			Hosts   []string `json:"hosts"`
			Figures []struct {
				Backend string  `json:"backend"`
				Bytes   int64   `json:"bytes"`
				AlgBW   float64 `json:"algbw_gbs"`
			} `json:"figures"`
		} `json:"cross_bandwidth"`
	}
	run := func() (r report, out string) {
		args := append(append([]string{"preflight", "--bandwidth", "all", "--json"}, c.sshArgs()...), "--hosts", c.hostsFlag(1), "--torchrun", shim(t))
		cmd := exec.Command(gorunBin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		raw, err := cmd.Output()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("report is not JSON: %v\n%s\n%s", err, raw, stderr.String())
		}
		return r, string(raw)
	}
	slowNamed := func(r report) []string {
		var named []string
		for _, f := range r.Findings {
			if f.ID == "bandwidth.slow_node" {
				named = append(named, strings.Fields(f.Message)[0])
			}
		}
		return named
	}

	start := time.Now()
	r, out := run()
	if len(r.Cross) != 3 {
		t.Fatalf("want 3 node pairs around the ring, got %d:\n%s", len(r.Cross), out)
	}
	for _, p := range r.Cross {
		if len(p.Figures) == 0 || p.Figures[0].Backend != "gloo" {
			t.Fatalf("pair %v: no gloo figures:\n%s", p.Hosts, out)
		}
	}
	if n := slowNamed(r); len(n) != 0 {
		t.Fatalf("no shaping, yet slow: %v\n%s", n, out)
	}
	t.Logf("unshaped: %s", time.Since(start).Round(time.Second))

	if o, err := exec.Command("tc", "qdisc", "replace", "dev", veth, "root", "tbf", "rate", "100mbit", "burst", "32kbit", "latency", "400ms").CombinedOutput(); err != nil {
		t.Fatalf("tc tbf on %s: %v %s", veth, err, o)
	}
	t.Cleanup(func() { exec.Command("tc", "qdisc", "del", "dev", veth, "root").Run() })
	r, out = run()
	if n := slowNamed(r); len(n) != 1 || n[0] != c.nodes[2] {
		t.Fatalf("slow nodes %v, want only %s:\n%s", n, c.nodes[2], out)
	}
	for _, p := range r.Cross {
		t.Logf("%v: %+v", p.Hosts, p.Figures)
	}
	for _, f := range r.Findings {
		if strings.HasPrefix(f.ID, "bandwidth.") {
			t.Logf("%s %s: %s", f.Severity, f.ID, f.Message)
		}
	}
}
