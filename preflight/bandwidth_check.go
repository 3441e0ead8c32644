package preflight

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// FarBelow is the fraction of the expected figure under which a measured
// bandwidth is a warning. Good hardware reaches 70–85% of line rate
// (pinned host copies 75–85% of PCIe; all_reduce busbw 71% on 2×H200
// NV18), so half is far below: a link down, trained narrower or slower,
// or traffic through the wrong NUMA node.
const FarBelow = 0.5

// nvlinkRates is one NVLink's rate per direction, GB/s, by GPU
// generation (compute capability major.minor): NVLink 2 (V100), 3 (A100)
// and 4 (H100/H200) move 25 GB/s per link and direction (A100 NV12 = 300
// GB/s, H100/H200 NV18 = 450 GB/s; nvidia-smi nvlink -s shows 26.56 GB/s
// per link on H200); NVLink 5 (B200) doubles it (18 links, 900 GB/s).
var nvlinkRates = map[string]struct {
	gen  string
	gbps float64
}{
	"7.0":  {"NVLink 2", 25},
	"8.0":  {"NVLink 3", 25},
	"9.0":  {"NVLink 4", 25},
	"10.0": {"NVLink 5", 50},
}

// NVLinkRate is the per-link, per-direction NVLink rate of a GPU
// generation in GB/s; ok is false for generations without a known rate.
func NVLinkRate(computeCapability string) (gbps float64, gen string, ok bool) {
	r, ok := nvlinkRates[computeCapability]
	return r.gbps, r.gen, ok
}

// PCIeLaneRate is one PCIe lane's data rate per direction in GB/s after
// line encoding (Gen1/2 8b/10b, Gen3+ 128b/130b); 0 when unknown.
func PCIeLaneRate(gen int) float64 {
	switch gen {
	case 1:
		return 0.25
	case 2:
		return 0.5
	case 3:
		return 0.985
	case 4:
		return 1.969
	case 5:
		return 3.938
	case 6:
		return 7.877
	}
	return 0
}

// Expectation is a line rate to judge a figure against, with where it
// comes from ("NV18 × 25 GB/s (NVLink 4, cc 9.0)").
type Expectation struct {
	GBs    float64
	Source string
}

// Known reports whether there is an expectation at all.
func (e Expectation) Known() bool { return e.GBs > 0 }

// topoLinks reads "NV18" from a topology cell; 0 for PCIe paths.
func topoLinks(cell string) int {
	if !strings.HasPrefix(cell, "NV") {
		return 0
	}
	n, err := strconv.Atoi(cell[2:])
	if err != nil {
		return 0
	}
	return n
}

// HostExpectation is a GPU's host link: PCIe generation × width at the
// most the GPU and slot allow (the current generation drops at idle).
func HostExpectation(g GPUFacts) Expectation {
	gen, width := max(g.PCIeGenMax, g.PCIeGen), max(g.PCIeWidthMax, g.PCIeWidth)
	rate := PCIeLaneRate(gen)
	if rate == 0 || width == 0 {
		return Expectation{}
	}
	return Expectation{GBs: rate * float64(width), Source: fmt.Sprintf("PCIe Gen%d x%d = %.3g GB/s per lane × %d", gen, width, rate, width)}
}

// PairExpectation is GPU i↔j per direction: NVLink count × per-link rate
// when the topology says NV#, else the slower GPU's PCIe link.
func PairExpectation(f Facts, i, j int) Expectation {
	gi, okI := gpuByIndex(f, i)
	gj, okJ := gpuByIndex(f, j)
	if !okI || !okJ {
		return Expectation{}
	}
	cell := ""
	if i < len(f.Topology) && j < len(f.Topology[i]) {
		cell = f.Topology[i][j]
	}
	if n := topoLinks(cell); n > 0 {
		rate, gen, ok := NVLinkRate(gi.ComputeCapability)
		if !ok {
			return Expectation{}
		}
		return Expectation{GBs: float64(n) * rate, Source: fmt.Sprintf("%s × %g GB/s (%s, cc %s)", cell, rate, gen, gi.ComputeCapability)}
	}
	a, b := HostExpectation(gi), HostExpectation(gj)
	if !a.Known() || !b.Known() {
		return Expectation{}
	}
	if b.GBs < a.GBs {
		a = b
	}
	path := cell
	if path == "" {
		path = "PCIe"
	}
	return Expectation{GBs: a.GBs, Source: path + " path, " + a.Source}
}

// AllReduceExpectation is the busbw ceiling of an all_reduce over the
// node's GPUs: the slowest pair's link (NVLink or PCIe).
func AllReduceExpectation(f Facts, ranks int) Expectation {
	var e Expectation
	for i := 0; i < ranks; i++ {
		for j := i + 1; j < ranks; j++ {
			p := PairExpectation(f, i, j)
			if !p.Known() {
				return Expectation{}
			}
			if !e.Known() || p.GBs < e.GBs {
				e = p
			}
		}
	}
	return e
}

func gpuByIndex(f Facts, i int) (GPUFacts, bool) {
	for _, g := range f.GPUs {
		if g.Index == i {
			return g, true
		}
	}
	return GPUFacts{}, false
}

// p2pRemedy is the advice for a P2P copy that returned wrong data.
const p2pRemedy = "P2P reads through an IOMMU or a PCIe switch with ACS enabled can return wrong data: " +
	"disable ACS on the switches (setpci) or boot with iommu=pt / intel_iommu=off (amd_iommu=off), then re-run; " +
	"until then NCCL_P2P_DISABLE=1 makes NCCL go through host memory (the plan sets it for this node unless you set it)"

// checkBandwidth judges one node's measured figures against what its
// topology should give.
func checkBandwidth(f Facts) []Finding {
	b := f.Bandwidth
	if b == nil {
		return nil
	}
	var out []Finding
	hooks := ""
	if len(b.Hooks) > 0 {
		hooks = " [test hooks: " + strings.Join(b.Hooks, " ") + "]"
	}
	for _, s := range b.Stalled {
		lim := ""
		if s.Seconds > 0 {
			lim = fmt.Sprintf(" within its %gs limit", s.Seconds)
		}
		out = append(out, Finding{ID: "bandwidth.stalled", Severity: SeverityFail,
			Message:  fmt.Sprintf("bandwidth step %q on %s did not finish%s; the measurement was killed", s.Step, f.Host, lim),
			Evidence: fmt.Sprintf("python %s, %.1fs in%s", b.Python, b.Seconds, hooks),
			Remedy:   stalledStepRemedy(s.Step)})
	}
	if len(b.Errors) > 0 {
		sev := SeverityWarn
		if b.GPUs == 0 && !b.NoGPUs && len(b.Stalled) == 0 {
			sev = SeverityFail // nothing was measured at all
		}
		out = append(out, Finding{ID: "bandwidth.errors", Severity: sev,
			Message:  fmt.Sprintf("%d bandwidth step(s) failed on %s", len(b.Errors), f.Host),
			Evidence: truncate(strings.Join(b.Errors, "; "), 600) + hooks,
			Remedy:   "run the step by hand with the same python (gorun preflight --bandwidth node on the node) and read the error"})
	}
	if b.NoGPUs {
		out = append(out, ok("bandwidth.gpus", "no GPUs on this node: P2P, host-link and NCCL all_reduce steps skipped", "torch "+b.Torch))
		return out
	}
	out = append(out, checkP2PBandwidth(f, hooks)...)
	out = append(out, checkHostBandwidth(f, hooks)...)
	out = append(out, checkAllReduceBandwidth(f, hooks)...)
	return out
}

func stalledStepRemedy(step string) string {
	switch {
	case strings.HasPrefix(step, "p2p"):
		return "a P2P copy that never completes points at the IOMMU or PCIe ACS (see bandwidth.p2p_corrupt's remedy); NCCL_P2P_DISABLE=1 avoids the path until it is fixed"
	case strings.HasPrefix(step, "host"):
		return "a host copy that never completes: check dmesg for Xid errors and the GPU's PCIe link (nvidia-smi -q -d PCIE)"
	case strings.HasPrefix(step, "allreduce"), strings.HasPrefix(step, "cross"):
		return "NCCL did not complete: run with NCCL_DEBUG=INFO to see the transport it picked, and check the P2P and network findings"
	case step == "init":
		return "importing torch or initialising CUDA hung: check nvidia-smi and dmesg on the node"
	}
	return "run the measurement by hand on the node to see where it hangs"
}

func checkP2PBandwidth(f Facts, hooks string) []Finding {
	var out, slow []Finding
	var lines []string
	remedy := p2pRemedy
	if v, set := f.Env["NCCL_P2P_DISABLE"]; set {
		remedy += fmt.Sprintf("; NCCL_P2P_DISABLE=%s is already set on %s, and the plan keeps a value you set", v, f.Host)
	}
	for _, p := range f.Bandwidth.P2P {
		for _, d := range []struct {
			src, dst    int
			bad, offset int64
		}{{p.Src, p.Dst, p.BadBytes, p.FirstBad}, {p.Dst, p.Src, p.ReverseBadBytes, p.ReverseFirstBad}} {
			if d.bad > 0 {
				out = append(out, Finding{ID: "bandwidth.p2p_corrupt", Severity: SeverityFail,
					Message: fmt.Sprintf("P2P copy GPU%d→GPU%d on %s returned wrong data", d.src, d.dst, f.Host),
					Evidence: fmt.Sprintf("%d of %d bytes differ, first at byte %d; peer access %v%s",
						d.bad, p.Bytes, d.offset, p.PeerAccess, hooks),
					Remedy: remedy})
			}
		}
		e := PairExpectation(f, p.Src, p.Dst)
		line := fmt.Sprintf("GPU%d→GPU%d %.1f GB/s, GPU%d→GPU%d %.1f, bidirectional %.1f, %.1f µs", p.Src, p.Dst, p.UniGBs, p.Dst, p.Src, p.ReverseUniGBs, p.BidirGBs, p.LatencyUs)
		worst := p.UniGBs
		if p.ReverseUniGBs > 0 {
			worst = min(worst, p.ReverseUniGBs)
		}
		if e.Known() {
			line += fmt.Sprintf(" (expect ≤ %.0f, %s)", e.GBs, e.Source)
			if worst < FarBelow*e.GBs {
				slow = append(slow, Finding{ID: "bandwidth.p2p", Severity: SeverityWarn,
					Message: fmt.Sprintf("P2P GPU%d↔GPU%d on %s moves %.0f%% of what its link should give", p.Src, p.Dst, f.Host, 100*worst/e.GBs),
					Evidence: fmt.Sprintf("%.1f GB/s GPU%d→GPU%d, %.1f GPU%d→GPU%d, %.1f bidirectional; expected about %.0f GB/s per direction from %s; peer access %v",
						p.UniGBs, p.Src, p.Dst, p.ReverseUniGBs, p.Dst, p.Src, p.BidirGBs, e.GBs, e.Source, p.PeerAccess),
					Remedy: "check `nvidia-smi nvlink -s` for links down or slow, `nvidia-smi topo -m` for the path, and that peer access is enabled (ACS/IOMMU can force P2P through the root complex)"})
			}
		}
		lines = append(lines, line)
	}
	verifiedWord := " verified and"
	if len(out) > 0 { // corrupt pairs, reported above
		verifiedWord = ""
	}
	out = append(out, slow...)
	if len(f.Bandwidth.P2P) > 0 && len(slow) == 0 {
		out = append(out, ok("bandwidth.p2p", fmt.Sprintf("P2P copies between %d GPU pair(s)%s near their links' rate", len(f.Bandwidth.P2P), verifiedWord),
			strings.Join(lines, "; ")))
	}
	if f.Bandwidth.GPUs == 1 {
		out = append(out, ok("bandwidth.p2p", "one GPU: no GPU pair to measure", ""))
	}
	return out
}

func checkHostBandwidth(f Facts, hooks string) []Finding {
	var out, slow []Finding
	var lines []string
	local := map[int]float64{}
	for _, h := range f.Bandwidth.Host {
		if h.Local {
			local[h.GPU] = h.H2DGBs
		}
	}
	for _, h := range f.Bandwidth.Host {
		where := "local"
		if !h.Local {
			where = "remote"
		}
		for _, d := range []struct {
			dir string
			bad int64
		}{{"host→device", h.BadBytes}, {"device→host", h.ReverseBadBytes}} {
			if d.bad > 0 {
				out = append(out, Finding{ID: "bandwidth.host_corrupt", Severity: SeverityFail,
					Message:  fmt.Sprintf("%s copy of GPU%d on %s returned wrong data", d.dir, h.GPU, f.Host),
					Evidence: fmt.Sprintf("%d of %d bytes differ (pinned memory on NUMA node %d, CPUs %s)%s", d.bad, h.Bytes, h.NUMANode, h.CPUs, hooks),
					Remedy:   "check dmesg for Xid and AER (PCIe) errors; reseat or replace the GPU or riser; with an IOMMU, check its mode (iommu=pt)"})
			}
		}
		g, _ := gpuByIndex(f, h.GPU)
		e := HostExpectation(g)
		line := fmt.Sprintf("GPU%d %s (node %d) H2D %.1f, D2H %.1f GB/s", h.GPU, where, h.NUMANode, h.H2DGBs, h.D2HGBs)
		if e.Known() {
			line += fmt.Sprintf(" (%.0f%% of %s)", 100*math.Min(h.H2DGBs, h.D2HGBs)/e.GBs, e.Source)
			worst := math.Min(h.H2DGBs, h.D2HGBs)
			if h.Local && worst < FarBelow*e.GBs {
				slow = append(slow, Finding{ID: "bandwidth.host", Severity: SeverityWarn,
					Message: fmt.Sprintf("GPU%d's host link on %s moves %.0f%% of what PCIe Gen%d x%d allows", h.GPU, f.Host, 100*worst/e.GBs, max(g.PCIeGenMax, g.PCIeGen), max(g.PCIeWidthMax, g.PCIeWidth)),
					Evidence: fmt.Sprintf("pinned, CPUs %s (NUMA node %d): H2D %.1f GB/s, D2H %.1f GB/s; expected about %.0f (%s; 75–85%% of it is typical); link now Gen%d x%d",
						h.CPUs, h.NUMANode, h.H2DGBs, h.D2HGBs, e.GBs, e.Source, g.PCIeGen, g.PCIeWidth),
					Remedy: "check the slot and riser (`nvidia-smi -q -d PCIE`, `lspci -vv` LnkSta), BIOS PCIe settings, and that no other device shares the switch"})
			}
		}
		if !h.Local {
			if l := local[h.GPU]; l > 0 && h.H2DGBs < FarBelow*l {
				slow = append(slow, Finding{ID: "bandwidth.host_numa", Severity: SeverityWarn,
					Message:  fmt.Sprintf("GPU%d on %s is much slower fed from NUMA node %d than from its own", h.GPU, f.Host, h.NUMANode),
					Evidence: fmt.Sprintf("H2D %.1f GB/s from CPUs %s, %.1f from the GPU's own node", h.H2DGBs, h.CPUs, l),
					Remedy:   "keep each rank on its GPU's NUMA node (gorun binds ranks to GPU-local CPUs unless --numa-binding or --run-path is used)"})
			}
		}
		lines = append(lines, line)
	}
	verifiedWord := " verified and"
	if len(out) > 0 {
		verifiedWord = ""
	}
	out = append(out, slow...)
	if len(lines) > 0 && len(slow) == 0 {
		out = append(out, ok("bandwidth.host", "host↔device copies from pinned memory"+verifiedWord+" near their PCIe links' rate", strings.Join(lines, "; ")))
	}
	return out
}

func checkAllReduceBandwidth(f Facts, hooks string) []Finding {
	ar := f.Bandwidth.AllReduce
	if len(ar) == 0 {
		return nil
	}
	sort.SliceStable(ar, func(i, j int) bool { return ar[i].Bytes < ar[j].Bytes })
	var out []Finding
	var lines []string
	for _, a := range ar {
		lines = append(lines, fmt.Sprintf("%s busbw %.1f GB/s (algbw %.1f, %.0f µs)", sizeString(a.Bytes), a.BusBW, a.AlgBW, a.TimeUs))
	}
	last := ar[len(ar)-1]
	if last.BadValues > 0 {
		out = append(out, Finding{ID: "bandwidth.allreduce_corrupt", Severity: SeverityFail,
			Message:  fmt.Sprintf("NCCL all_reduce over %d GPU(s) on %s gave wrong sums", last.Ranks, f.Host),
			Evidence: fmt.Sprintf("%d wrong values in the verifying all_reduce%s", last.BadValues, hooks),
			Remedy:   p2pRemedy})
	}
	nvls := ""
	if last.NVLS != "" {
		nvls = "; NCCL_NVLS_ENABLE=" + last.NVLS
	}
	if last.Ranks < 2 {
		out = append(out, ok("bandwidth.allreduce", "one GPU: all_reduce is a local copy (busbw is 0 by definition); NCCL ran and summed correctly",
			strings.Join(lines, "; ")+nvls))
		return out
	}
	e := AllReduceExpectation(f, last.Ranks)
	ev := strings.Join(lines, "; ") + nvls
	if !e.Known() {
		out = append(out, ok("bandwidth.allreduce", fmt.Sprintf("NCCL all_reduce over %d GPUs: %.1f GB/s busbw at %s (no expectation for this topology)", last.Ranks, last.BusBW, sizeString(last.Bytes)), ev))
		return out
	}
	ev += fmt.Sprintf("; expected ≤ %.0f GB/s from %s", e.GBs, e.Source)
	if p2p := f.Env["NCCL_P2P_DISABLE"]; p2p != "" && p2p != "0" {
		ev += "; NCCL_P2P_DISABLE=" + p2p + " is set on the node"
	}
	if last.BusBW < FarBelow*e.GBs {
		remedy := "check the P2P findings above and `nvidia-smi nvlink -s`; run with NCCL_DEBUG=INFO to see which transport NCCL chose"
		if p2p := f.Env["NCCL_P2P_DISABLE"]; p2p != "" && p2p != "0" {
			remedy = "NCCL_P2P_DISABLE=" + p2p + " sends NCCL through host memory: unset it unless a P2P fault needs it"
		}
		out = append(out, Finding{ID: "bandwidth.allreduce", Severity: SeverityWarn,
			Message:  fmt.Sprintf("NCCL all_reduce over %d GPUs on %s reaches %.0f%% of the links' rate (%.1f GB/s busbw at %s)", last.Ranks, f.Host, 100*last.BusBW/e.GBs, last.BusBW, sizeString(last.Bytes)),
			Evidence: ev, Remedy: remedy})
		return out
	}
	out = append(out, ok("bandwidth.allreduce", fmt.Sprintf("NCCL all_reduce over %d GPUs: %.1f GB/s busbw at %s (%.0f%% of %.0f)", last.Ranks, last.BusBW, sizeString(last.Bytes), 100*last.BusBW/e.GBs, e.GBs), ev))
	return out
}

func sizeString(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// P2PFaults lists the GPU pairs of a node whose P2P copies returned wrong
// data or stalled ("0→1"), for the plan's NCCL_P2P_DISABLE rule.
func P2PFaults(f Facts) []string {
	if f.Bandwidth == nil {
		return nil
	}
	var out []string
	for _, p := range f.Bandwidth.P2P {
		if p.BadBytes > 0 {
			out = append(out, fmt.Sprintf("GPU%d→GPU%d wrong data", p.Src, p.Dst))
		}
		if p.ReverseBadBytes > 0 {
			out = append(out, fmt.Sprintf("GPU%d→GPU%d wrong data", p.Dst, p.Src))
		}
	}
	for _, s := range f.Bandwidth.Stalled {
		if strings.HasPrefix(s.Step, "p2p") {
			out = append(out, strings.Replace(s.Step, "p2p ", "GPU pair ", 1)+" stalled")
		}
	}
	return out
}
