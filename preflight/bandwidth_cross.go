package preflight

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// NICRate is the fastest ACTIVE RDMA port of a node in GB/s (the rate
// file's Gb/s / 8); 0 when it has none.
func NICRate(ports []RDMAPort) float64 {
	best := 0.0
	for _, p := range ports {
		if p.State != "ACTIVE" {
			continue
		}
		f := strings.Fields(p.Rate)
		if len(f) == 0 {
			continue
		}
		if gbit, err := strconv.ParseFloat(f[0], 64); err == nil {
			best = max(best, gbit/8)
		}
	}
	return best
}

// CrossResult is one node pair's all_reduce figures, or why it has none.
type CrossResult struct {
	Hosts   []string         `json:"hosts"`
	Figures []CrossBandwidth `json:"figures,omitempty"`
	Stalled []string         `json:"stalled,omitempty"`
	Errors  []string         `json:"errors,omitempty"`
}

// CheckCross names the node (or link) that is slow. Pairs are compared at
// the largest size every pair reached. A node's figure is its best pair (a
// healthy node has at least one healthy neighbour on the ring; a slow
// node's NIC slows all of its pairs); a node whose best is below FarBelow
// of the median node is named slow. Without a slow node, a pair below
// FarBelow of the best pair is named as a slow link.
//
// nicGBs, when it has both nodes of a pair, is each node's fastest ACTIVE
// RDMA port in GB/s (NICRate): an NCCL pair whose bus bandwidth at its
// largest size is below FarBelow of the slower node's NIC is a warning.
// gloo pairs are not judged against the NIC: gloo over TCP is bound by the
// CPUs long before a fast NIC.
func CheckCross(results []CrossResult, nicGBs map[string]float64) []Finding {
	if len(results) == 0 {
		return nil
	}
	var out []Finding
	for _, r := range results {
		if len(r.Figures) == 0 || r.Figures[0].Backend != "nccl" {
			continue
		}
		a, okA := nicGBs[r.Hosts[0]]
		b, okB := nicGBs[r.Hosts[1]]
		if !okA || !okB || a <= 0 || b <= 0 {
			continue
		}
		e := min(a, b)
		last := r.Figures[len(r.Figures)-1]
		if last.BusBW < FarBelow*e {
			out = append(out, Finding{ID: "bandwidth.cross_nic", Severity: SeverityWarn,
				Message: fmt.Sprintf("NCCL all_reduce between %s and %s moves %.0f%% of the slower NIC's rate", r.Hosts[0], r.Hosts[1], 100*last.BusBW/e),
				Evidence: fmt.Sprintf("busbw %.1f GB/s at %s; fastest ACTIVE RDMA port: %s %.1f GB/s, %s %.1f GB/s (line rate; nccl-tests reach 46–49 GB/s on 400G NDR)",
					last.BusBW, sizeString(last.Bytes), r.Hosts[0], a, r.Hosts[1], b),
				Remedy: "run with NCCL_DEBUG=INFO and check that NCCL uses the IB/RoCE transport (NET/IB), not sockets; check GPUDirect RDMA (gdr findings) and the NIC's PCIe link"})
		}
	}
	common := int64(-1)
	for _, r := range results {
		if len(r.Stalled) > 0 || len(r.Figures) == 0 {
			what := "failed"
			ev := strings.Join(r.Errors, "; ")
			if len(r.Stalled) > 0 {
				what = "stalled"
				ev = "stalled: " + strings.Join(r.Stalled, ", ") + "; " + ev
			}
			out = append(out, Finding{ID: "bandwidth.cross", Severity: SeverityFail,
				Message:  fmt.Sprintf("all_reduce between %s and %s %s", r.Hosts[0], r.Hosts[1], what),
				Evidence: truncate(ev, 600),
				Remedy:   "check that the nodes reach each other on the interface the plan uses (node.route findings), firewalls between them, and NCCL_DEBUG=INFO / the gloo error"})
			continue
		}
		for _, f := range r.Figures {
			if f.BadValues > 0 {
				out = append(out, Finding{ID: "bandwidth.cross_corrupt", Severity: SeverityFail,
					Message:  fmt.Sprintf("all_reduce between %s and %s gave wrong sums", r.Hosts[0], r.Hosts[1]),
					Evidence: fmt.Sprintf("%d wrong values (%s)", f.BadValues, f.Backend),
					Remedy:   "check the NICs' error counters and GPUDirect RDMA settings on both nodes"})
				break
			}
		}
		top := r.Figures[len(r.Figures)-1].Bytes
		if common < 0 || top < common {
			common = top
		}
	}
	type fig struct {
		r  CrossResult
		bw float64
	}
	var figs []fig
	best := map[string]float64{}
	var order []string
	top := 0.0
	for _, r := range results {
		for _, f := range r.Figures {
			if f.Bytes != common {
				continue
			}
			figs = append(figs, fig{r, f.AlgBW})
			top = max(top, f.AlgBW)
			for _, h := range r.Hosts {
				if _, seen := best[h]; !seen {
					order = append(order, h)
				}
				best[h] = max(best[h], f.AlgBW)
			}
		}
	}
	if len(figs) == 0 {
		return out
	}
	var lines []string
	for _, f := range figs {
		lines = append(lines, fmt.Sprintf("%s↔%s %.3g GB/s", f.r.Hosts[0], f.r.Hosts[1], f.bw))
	}
	bests := make([]float64, 0, len(best))
	for _, b := range best {
		bests = append(bests, b)
	}
	sort.Float64s(bests)
	median := bests[len(bests)/2]
	if len(bests)%2 == 0 {
		median = (bests[len(bests)/2-1] + bests[len(bests)/2]) / 2
	}
	evidence := fmt.Sprintf("all_reduce algbw at %s (%s): %s; median node (its best pair) %.3g GB/s", sizeString(common), figs[0].r.Figures[0].Backend, strings.Join(lines, ", "), median)
	if len(figs) < 3 {
		out = append(out, ok("bandwidth.cross", fmt.Sprintf("all_reduce between nodes ran on %d pair(s); with fewer than 3 pairs no node can be singled out", len(figs)), evidence))
		return out
	}
	var slowNodes []string
	for _, h := range order {
		if best[h] < FarBelow*median {
			slowNodes = append(slowNodes, h)
		}
	}
	for _, h := range slowNodes {
		out = append(out, Finding{ID: "bandwidth.slow_node", Severity: SeverityWarn,
			Message:  fmt.Sprintf("%s is slow: its best all_reduce with a neighbour moved %.3g GB/s, under %.0f%% of the median node's %.3g", h, best[h], 100*FarBelow, median),
			Evidence: evidence,
			Remedy:   "check " + h + "'s NIC: link speed (ethtool, ibstat), errors, the interface NCCL uses, and traffic shaping (tc qdisc show)"})
	}
	slowLinks := 0
	if len(slowNodes) == 0 {
		for _, f := range figs {
			if f.bw < FarBelow*top {
				slowLinks++
				out = append(out, Finding{ID: "bandwidth.slow_link", Severity: SeverityWarn,
					Message:  fmt.Sprintf("the link between %s and %s is slow (%.3g GB/s against the best pair's %.3g)", f.r.Hosts[0], f.r.Hosts[1], f.bw, top),
					Evidence: evidence,
					Remedy:   "check the switch ports and cabling between the two nodes"})
			}
		}
	}
	if len(slowNodes) == 0 && slowLinks == 0 {
		out = append(out, ok("bandwidth.cross", fmt.Sprintf("all_reduce between nodes: %d pairs, every node within %.0f%% of the median", len(figs), 100*FarBelow), evidence))
	}
	return out
}
