package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

func TestNVLinkAndPCIeRates(t *testing.T) {
	for _, tc := range []struct {
		cc   string
		want float64
		ok   bool
	}{{"7.0", 25, true}, {"8.0", 25, true}, {"9.0", 25, true}, {"10.0", 50, true}, {"8.6", 0, false}, {"", 0, false}} {
		got, _, ok := NVLinkRate(tc.cc)
		if got != tc.want || ok != tc.ok {
			t.Errorf("NVLinkRate(%q) = %g, %v; want %g, %v", tc.cc, got, ok, tc.want, tc.ok)
		}
	}
	for gen, want := range map[int]float64{0: 0, 1: 0.25, 3: 0.985, 4: 1.969, 5: 3.938, 7: 0} {
		if got := PCIeLaneRate(gen); got != want {
			t.Errorf("PCIeLaneRate(%d) = %g, want %g", gen, got, want)
		}
	}
}

// h200Pair is the 2×H200 NV18 box of reference/h200-2gpu.
func h200Pair() Facts {
	g := func(i int) GPUFacts {
		return GPUFacts{Index: i, Name: "NVIDIA H200", ComputeCapability: "9.0", PCIeGen: 1, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16, NUMANode: 0}
	}
	return Facts{Host: "n1", GPUs: []GPUFacts{g(0), g(1)}, Topology: [][]string{{"X", "NV18"}, {"NV18", "X"}}}
}

func TestExpectations(t *testing.T) {
	pcie := h200Pair()
	pcie.Topology = [][]string{{"X", "PXB"}, {"PXB", "X"}}
	pcie.GPUs[1].PCIeGenMax = 4
	a100 := h200Pair()
	a100.GPUs[0].ComputeCapability, a100.GPUs[1].ComputeCapability = "8.0", "8.0"
	a100.Topology = [][]string{{"X", "NV12"}, {"NV12", "X"}}
	narrow := h200Pair().GPUs[0]
	narrow.PCIeWidthMax, narrow.PCIeWidth = 4, 4
	for _, tc := range []struct {
		name string
		got  Expectation
		want float64
		src  string
	}{
		{"H200 NV18 pair", PairExpectation(h200Pair(), 0, 1), 450, "NV18 × 25 GB/s (NVLink 4, cc 9.0)"},
		{"A100 NV12 pair", PairExpectation(a100, 0, 1), 300, "NV12"},
		{"PCIe pair: the slower GPU", PairExpectation(pcie, 0, 1), 1.969 * 16, "PXB path, PCIe Gen4 x16"},
		{"unknown GPU", PairExpectation(h200Pair(), 0, 5), 0, ""},
		{"host Gen5 x16 (idle at Gen1)", HostExpectation(h200Pair().GPUs[0]), 3.938 * 16, "PCIe Gen5 x16"},
		{"host trained at x4", HostExpectation(narrow), 3.938 * 4, "x4"},
		{"all_reduce 2×H200", AllReduceExpectation(h200Pair(), 2), 450, "NV18"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if math.Abs(tc.got.GBs-tc.want) > 1e-9 || !strings.Contains(tc.got.Source, tc.src) {
				t.Errorf("got %g (%q), want %g (%q)", tc.got.GBs, tc.got.Source, tc.want, tc.src)
			}
		})
	}
}

const h200Output = `{"event":"begin","step":"init","limit_s":60}
{"event":"end","step":"init"}
{"event":"note","msg":"2 GPU(s): NVIDIA H200","gpus":2,"torch":"2.11.0+cu130","cuda":"13.0","nccl":"2.28.9"}
{"event":"begin","step":"p2p 0<->1","limit_s":5}
{"event":"p2p","src":0,"dst":1,"bytes":268435456,"peer_access":true,"uni_gbs":389.5,"reverse_uni_gbs":390.1,"bidir_gbs":741.2,"latency_us":14.2,"bad_bytes":0,"first_bad":-1,"reverse_bad_bytes":0,"reverse_first_bad":-1}
{"event":"end","step":"p2p 0<->1"}
{"event":"host","gpu":0,"numa_node":0,"local":true,"cpus":"0-15","bytes":268435456,"h2d_gbs":53.1,"d2h_gbs":54.9,"bad_bytes":0,"first_bad":-1,"reverse_bad_bytes":0,"reverse_first_bad":-1}
{"event":"host","gpu":1,"numa_node":0,"local":true,"cpus":"0-15","bytes":268435456,"h2d_gbs":52.8,"d2h_gbs":55.0,"bad_bytes":0,"first_bad":-1,"reverse_bad_bytes":0,"reverse_first_bad":-1}
{"event":"allreduce","ranks":2,"bytes":1048576,"dtype":"bfloat16","time_us":29.7,"algbw_gbs":35.3,"busbw_gbs":35.3,"bad_values":0,"nvls":"0"}
{"event":"allreduce","ranks":2,"bytes":2147483648,"dtype":"bfloat16","time_us":6296.8,"algbw_gbs":341.0,"busbw_gbs":341.0,"bad_values":0,"nvls":"0"}
`

func TestParseBandwidthOutput(t *testing.T) {
	b, err := ParseBandwidthOutput(strings.NewReader(h200Output + "not json\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b.GPUs != 2 || b.Torch != "2.11.0+cu130" || b.NCCL != "2.28.9" || len(b.P2P) != 1 || len(b.Host) != 2 || len(b.AllReduce) != 2 {
		t.Fatalf("parsed %+v", b)
	}
	if b.P2P[0].UniGBs != 389.5 || b.AllReduce[1].BusBW != 341 || b.Host[1].D2HGBs != 55 {
		t.Errorf("figures: %+v", b)
	}
	if len(b.Errors) != 1 || !strings.Contains(b.Errors[0], "not json") {
		t.Errorf("errors = %q, want the unreadable line", b.Errors)
	}
}

func TestBusBW(t *testing.T) {
	for n, want := range map[int]float64{1: 0, 2: 100, 4: 150, 8: 175} {
		if got := BusBW(100, n); got != want {
			t.Errorf("BusBW(100, %d) = %g, want %g", n, got, want)
		}
	}
}

// findings runs the bandwidth checks on h200Pair with the output edited.
func findings(t *testing.T, edit func(*BandwidthFacts), env map[string]string) []Finding {
	t.Helper()
	b, err := ParseBandwidthOutput(strings.NewReader(h200Output))
	if err != nil {
		t.Fatal(err)
	}
	edit(&b)
	f := h200Pair()
	f.Env = env
	f.Bandwidth = &b
	return checkBandwidth(f)
}

func TestCheckBandwidth(t *testing.T) {
	type want struct{ id, sev, text string }
	for _, tc := range []struct {
		name string
		edit func(*BandwidthFacts)
		env  map[string]string
		want []want
		not  []string // ids that must not appear with a non-ok severity
	}{
		{name: "healthy 2×H200", edit: func(*BandwidthFacts) {},
			want: []want{{"bandwidth.p2p", "ok", "389.5"}, {"bandwidth.host", "ok", "53.1"}, {"bandwidth.allreduce", "ok", "341.0 GB/s busbw at 2 GiB"}},
			not:  []string{"bandwidth.p2p", "bandwidth.host", "bandwidth.allreduce"}},
		{name: "corrupt P2P copy is a fail with the remedy", edit: func(b *BandwidthFacts) {
			b.P2P[0].ReverseBadBytes, b.P2P[0].ReverseFirstBad = 1, 12345
			b.Hooks = []string{"GORUN_BW_TEST_CORRUPT=p2p"}
		}, want: []want{{"bandwidth.p2p_corrupt", "fail", "NCCL_P2P_DISABLE=1"}, {"bandwidth.p2p_corrupt", "fail", "GPU1→GPU0"}, {"bandwidth.p2p_corrupt", "fail", "GORUN_BW_TEST_CORRUPT"}}},
		{name: "degraded NVLink is a warning", edit: func(b *BandwidthFacts) { b.P2P[0].UniGBs = 120 },
			want: []want{{"bandwidth.p2p", "warn", "27%"}}},
		{name: "one slow direction is enough", edit: func(b *BandwidthFacts) { b.P2P[0].ReverseUniGBs = 90 },
			want: []want{{"bandwidth.p2p", "warn", "90.0 GPU1→GPU0"}}},
		{name: "the user's NCCL_P2P_DISABLE is named with a corrupt copy", edit: func(b *BandwidthFacts) { b.P2P[0].BadBytes = 4 },
			env:  map[string]string{"NCCL_P2P_DISABLE": "0"},
			want: []want{{"bandwidth.p2p_corrupt", "fail", "NCCL_P2P_DISABLE=0 is already set on n1, and the plan keeps a value you set"}}},
		{name: "x4 host link is a warning", edit: func(b *BandwidthFacts) { b.Host[0].H2DGBs = 12 },
			want: []want{{"bandwidth.host", "warn", "GPU0"}}},
		{name: "remote NUMA far slower", edit: func(b *BandwidthFacts) {
			b.Host = append(b.Host, HostBandwidth{GPU: 0, NUMANode: 1, CPUs: "16-31", H2DGBs: 20, D2HGBs: 50})
		}, want: []want{{"bandwidth.host_numa", "warn", "NUMA node 1"}}},
		{name: "stalled step is a fail", edit: func(b *BandwidthFacts) {
			b.Stalled = []Stall{{Step: "allreduce 2147483648", Seconds: 10}}
		}, want: []want{{"bandwidth.stalled", "fail", "10s limit"}}},
		{name: "host copy corrupt", edit: func(b *BandwidthFacts) { b.Host[1].BadBytes = 1 },
			want: []want{{"bandwidth.host_corrupt", "fail", "GPU1"}}},
		{name: "all_reduce wrong sums", edit: func(b *BandwidthFacts) { b.AllReduce[1].BadValues = 3 },
			want: []want{{"bandwidth.allreduce_corrupt", "fail", "3 wrong values"}}},
		{name: "NCCL_P2P_DISABLE=1: all_reduce falls and the report says why", edit: func(b *BandwidthFacts) { b.AllReduce[1].BusBW = 40 },
			env:  map[string]string{"NCCL_P2P_DISABLE": "1"},
			want: []want{{"bandwidth.allreduce", "warn", "NCCL_P2P_DISABLE=1 sends NCCL through host memory"}}},
		{name: "one GPU: trivial all_reduce", edit: func(b *BandwidthFacts) {
			b.GPUs, b.P2P = 1, nil
			b.AllReduce = []AllReduceBandwidth{{Ranks: 1, Bytes: 1 << 30, AlgBW: 1500}}
		}, want: []want{{"bandwidth.allreduce", "ok", "busbw is 0 by definition"}, {"bandwidth.p2p", "ok", "no GPU pair"}}},
		{name: "no GPUs said once", edit: func(b *BandwidthFacts) { *b = BandwidthFacts{NoGPUs: true, Torch: "1.13"} },
			want: []want{{"bandwidth.gpus", "ok", "no GPUs"}}},
		{name: "nothing ran: fail", edit: func(b *BandwidthFacts) { *b = BandwidthFacts{Errors: []string{"python3 exited: exit status 1"}} },
			want: []want{{"bandwidth.errors", "fail", "exit status 1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := findings(t, tc.edit, tc.env)
			for _, w := range tc.want {
				found := false
				for _, f := range got {
					if f.ID == w.id && string(f.Severity) == w.sev && strings.Contains(f.Message+" "+f.Evidence+" "+f.Remedy, w.text) {
						found = true
					}
				}
				if !found {
					t.Errorf("no %s %s finding containing %q in\n%s", w.sev, w.id, w.text, dumpBW(got))
				}
			}
			for _, id := range tc.not {
				for _, f := range got {
					if f.ID == id && f.Severity != SeverityOK {
						t.Errorf("unexpected %s %s: %s", f.Severity, f.ID, f.Message)
					}
				}
			}
		})
	}
}

func dumpBW(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s %s %s | %s | %s\n", f.Severity, f.ID, f.Message, f.Evidence, f.Remedy)
	}
	return b.String()
}

func TestP2PFaults(t *testing.T) {
	f := h200Pair()
	if P2PFaults(f) != nil {
		t.Error("no bandwidth facts: want no faults")
	}
	f.Bandwidth = &BandwidthFacts{P2P: []P2PBandwidth{{Src: 0, Dst: 1, ReverseBadBytes: 2}}, Stalled: []Stall{{Step: "p2p 2<->3"}}}
	got := strings.Join(P2PFaults(f), "; ")
	if got != "GPU1→GPU0 wrong data; GPU pair 2<->3 stalled" {
		t.Errorf("P2PFaults = %q", got)
	}
}

func crossOf(a, b string, gbs float64) CrossResult {
	return CrossResult{Hosts: []string{a, b}, Figures: []CrossBandwidth{
		{Backend: "gloo", Bytes: 1 << 20, AlgBW: gbs}, {Backend: "gloo", Bytes: 16 << 20, AlgBW: gbs}}}
}

func TestCheckCross(t *testing.T) {
	slowC := []CrossResult{crossOf("a", "b", 1.1), crossOf("b", "c", 0.011), crossOf("c", "d", 0.012), crossOf("d", "a", 1.0)}
	slowC[3].Figures = slowC[3].Figures[:1] // one pair reached only 1 MiB: judged there
	got := CheckCross(slowC, nil)
	var named []string
	for _, f := range got {
		if f.ID == "bandwidth.slow_node" {
			named = append(named, f.Message)
		}
	}
	if len(named) != 1 || !strings.HasPrefix(named[0], "c is slow") {
		t.Errorf("slow nodes = %q, want only c\n%s", named, dumpBW(got))
	}
	if !strings.Contains(dumpBW(got), "1 MiB") {
		t.Errorf("want the figures compared at the common size, 1 MiB:\n%s", dumpBW(got))
	}

	// Three nodes, the slow one in two of the three pairs: the median
	// pair is slow, the median node is not.
	three := CheckCross([]CrossResult{crossOf("a", "b", 1), crossOf("b", "c", 0.01), crossOf("c", "a", 0.011)}, nil)
	if d := dumpBW(three); strings.Count(d, "bandwidth.slow_node") != 1 || !strings.Contains(d, "c is slow") {
		t.Errorf("three nodes, c slow:\n%s", d)
	}
	// One bad cable: both of its nodes have a healthy pair too.
	link := CheckCross([]CrossResult{crossOf("a", "b", 1), crossOf("b", "c", 0.01), crossOf("c", "d", 1.1), crossOf("d", "a", 0.9)}, nil)
	if d := dumpBW(link); strings.Contains(d, "slow_node") || !strings.Contains(d, "the link between b and c is slow") {
		t.Errorf("one slow link:\n%s", d)
	}

	two := CheckCross([]CrossResult{crossOf("a", "b", 1)}, nil)
	if len(two) != 1 || two[0].Severity != SeverityOK || !strings.Contains(two[0].Message, "fewer than 3 pairs") {
		t.Errorf("two nodes:\n%s", dumpBW(two))
	}
	even := CheckCross([]CrossResult{crossOf("a", "b", 1), crossOf("b", "c", 1.1), crossOf("c", "a", 0.9)}, nil)
	if len(even) != 1 || even[0].Severity != SeverityOK {
		t.Errorf("even ring:\n%s", dumpBW(even))
	}
	failed := CheckCross([]CrossResult{{Hosts: []string{"a", "b"}, Stalled: []string{"b: cross init"}}}, nil)
	if len(failed) != 1 || failed[0].Severity != SeverityFail || !strings.Contains(failed[0].Evidence, "cross init") {
		t.Errorf("stalled pair:\n%s", dumpBW(failed))
	}
}

// TestRunStepsKillsAStalledStep: a step past its limit ends the whole
// process group (the grandchild too) and is reported, well before the
// child would have finished.
func TestRunStepsKillsAStalledStep(t *testing.T) {
	script := `echo '{"event":"begin","step":"p2p 0<->1","limit_s":0.3}'; sleep 30 & wait`
	start := time.Now()
	f := runSteps(context.Background(), []string{"/bin/sh", "-c", script}, os.Environ())
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %s: the stall was not cut short", el)
	}
	if len(f.Stalled) != 1 || f.Stalled[0].Step != "p2p 0<->1" || f.Stalled[0].Seconds != 0.3 {
		t.Fatalf("stalled = %+v, errors %q", f.Stalled, f.Errors)
	}
}

func TestRunStepsReportsAFailedProcess(t *testing.T) {
	f := runSteps(context.Background(), []string{"/bin/sh", "-c", `echo '{"event":"note","msg":"no GPUs on this node"}'; echo boom >&2; exit 3`}, nil)
	if !f.NoGPUs || len(f.Errors) != 1 || !strings.Contains(f.Errors[0], "boom") {
		t.Errorf("got %+v", f)
	}
}

func TestMeasureNodeOnCPU(t *testing.T) {
	py := testenv.TorchPython(t)
	f := MeasureNode(context.Background(), BandwidthOptions{Python: py, Environ: os.Environ()})
	if !f.NoGPUs || len(f.Errors) != 0 || len(f.Stalled) != 0 {
		t.Fatalf("got %+v", f)
	}
	fs := checkBandwidth(Facts{Host: "cpu", Bandwidth: &f})
	if len(fs) != 1 || fs[0].ID != "bandwidth.gpus" {
		t.Errorf("want one bandwidth.gpus finding:\n%s", dumpBW(fs))
	}
}

func TestMeasureNodeStallHook(t *testing.T) {
	py := testenv.TorchPython(t)
	env := append(os.Environ(), "GORUN_BW_TEST_STALL=init", "GORUN_BW_TEST_LIMIT_S=1")
	start := time.Now()
	f := MeasureNode(context.Background(), BandwidthOptions{Python: py, Environ: env})
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %s for a 1 s limit", el)
	}
	if len(f.Stalled) != 1 || f.Stalled[0].Step != "init" {
		t.Fatalf("stalled = %+v", f)
	}
	fs := checkBandwidth(Facts{Host: "cpu", Bandwidth: &f})
	if fs[0].ID != "bandwidth.stalled" || fs[0].Severity != SeverityFail || !strings.Contains(fs[0].Evidence, "GORUN_BW_TEST_STALL=init") {
		t.Errorf("findings:\n%s", dumpBW(fs))
	}
}

func TestMeasurePairCorruptHook(t *testing.T) {
	py := testenv.TorchPython(t)
	env := append(os.Environ(), "GLOO_SOCKET_IFNAME=lo", "GORUN_BW_TEST_CORRUPT=cross")
	req := PairRequest{Master: "127.0.0.1:" + fmt.Sprint(41000+os.Getpid()%5000), BudgetSeconds: 0.5, LimitSeconds: 20}
	var wg sync.WaitGroup
	res := make([]BandwidthFacts, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := req
			q.Rank = r
			res[r] = MeasurePair(context.Background(), BandwidthOptions{Python: py, Environ: env}, q)
		}()
	}
	wg.Wait()
	if len(res[0].Cross) == 0 || res[0].Cross[0].BadValues == 0 {
		t.Fatalf("rank 0: %+v", res[0])
	}
	fs := CheckCross([]CrossResult{{Hosts: []string{"a", "b"}, Figures: res[0].Cross}}, nil)
	if fs[0].ID != "bandwidth.cross_corrupt" || fs[0].Severity != SeverityFail {
		t.Errorf("findings:\n%s", dumpBW(fs))
	}
}

// TestBandwidthReportGolden renders a 2×H200 node with a corrupted P2P copy
// and a three-node ring with one slow node, as text and JSON.
func TestBandwidthReportGolden(t *testing.T) {
	b, err := ParseBandwidthOutput(strings.NewReader(h200Output))
	if err != nil {
		t.Fatal(err)
	}
	b.Python, b.Seconds = "/opt/torch/.venv/bin/python", 4.2
	b.P2P[0].ReverseBadBytes, b.P2P[0].ReverseFirstBad = 1, 12345
	b.Hooks = []string{"GORUN_BW_TEST_CORRUPT=p2p"}
	b.Steps = []StepTime{{"init", 2.1}, {"p2p 0<->1", 0.21}, {"host 0 local", 0.31}, {"allreduce init", 0.9}, {"allreduce 2147483648", 0.12}}
	f := h200Pair()
	f.Hostname, f.Bandwidth = "gpu1", &b
	fs := checkBandwidth(f)
	cross := []CrossResult{crossOf("n1", "n2", 1.1), crossOf("n2", "n3", 0.011), crossOf("n3", "n1", 0.012)}
	rep := NewReport([]NodeReport{{Host: "n1", Facts: Facts{Hostname: "gpu1", Bandwidth: &b}, Findings: fs}}, CheckCross(cross, nil))
	rep.Cross = cross
	var txt strings.Builder
	if err := rep.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	golden(t, "bandwidth-report.txt", []byte(txt.String()))
	js, err := json.MarshalIndent(rep.Nodes[0].Facts.Bandwidth, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "bandwidth-facts.json", append(js, '\n'))
}

// TestBandwidthScriptUnit runs the Python unit tests of the embedded
// script's helpers (testdata/bandwidth_script_test.py) on CPU.
func TestBandwidthScriptUnit(t *testing.T) {
	py := testenv.TorchPython(t)
	out, err := exec.Command(py, "testdata/bandwidth_script_test.py").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestCrossAgainstNIC(t *testing.T) {
	ports := []RDMAPort{{State: "DOWN", Rate: "800 Gb/sec (4X XDR)"}, {State: "ACTIVE", Rate: "400 Gb/sec (4X NDR)"}, {State: "ACTIVE", Rate: "200 Gb/sec (4X HDR)"}}
	if got := NICRate(ports); got != 50 {
		t.Fatalf("NICRate = %g, want 50 (the fastest ACTIVE port)", got)
	}
	nccl := func(busbw float64) CrossResult {
		return CrossResult{Hosts: []string{"a", "b"}, Figures: []CrossBandwidth{{Backend: "nccl", Bytes: 1 << 30, BusBW: busbw, AlgBW: busbw}}}
	}
	nics := map[string]float64{"a": 50, "b": 25}
	if d := dumpBW(CheckCross([]CrossResult{nccl(8)}, nics)); !strings.Contains(d, "bandwidth.cross_nic") || !strings.Contains(d, "32%") {
		t.Errorf("8 GB/s over a 200G NIC:\n%s", d)
	}
	if d := dumpBW(CheckCross([]CrossResult{nccl(22)}, nics)); strings.Contains(d, "cross_nic") {
		t.Errorf("22 GB/s over a 200G NIC is fine:\n%s", d)
	}
	gloo := crossOf("a", "b", 0.3)
	if d := dumpBW(CheckCross([]CrossResult{gloo}, nics)); strings.Contains(d, "cross_nic") {
		t.Errorf("gloo is not judged against the NIC:\n%s", d)
	}
}
