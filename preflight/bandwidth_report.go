package preflight

import (
	"fmt"
	"sort"
	"strings"
)

// writeBandwidth prints a node's measured figures as a table under its
// findings.
func writeBandwidth(ew *errWriter, b *BandwidthFacts) {
	if b == nil {
		return
	}
	ew.printf("  bandwidth (%s, %.1fs):\n", b.Python, b.Seconds)
	if b.NoGPUs {
		ew.printf("    no GPUs\n")
	}
	if len(b.P2P) > 0 {
		ew.printf("    %-12s %10s %10s %10s %10s %s\n", "P2P pair", "a→b GB/s", "b→a GB/s", "bidir GB/s", "lat µs", "verified")
		for _, p := range b.P2P {
			ew.printf("    %-12s %10.1f %10.1f %10.1f %10.1f %s\n", fmt.Sprintf("GPU%d↔GPU%d", p.Src, p.Dst), p.UniGBs, p.ReverseUniGBs, p.BidirGBs, p.LatencyUs,
				verified(p.BadBytes+p.ReverseBadBytes))
		}
	}
	if len(b.Host) > 0 {
		ew.printf("    %-12s %-8s %10s %10s %s\n", "host link", "NUMA", "H2D GB/s", "D2H GB/s", "verified")
		for _, h := range b.Host {
			where := "local"
			if !h.Local {
				where = "remote"
			}
			ew.printf("    %-12s %-8s %10.1f %10.1f %s\n", fmt.Sprintf("GPU%d", h.GPU), fmt.Sprintf("%d %s", h.NUMANode, where), h.H2DGBs, h.D2HGBs,
				verified(h.BadBytes+h.ReverseBadBytes))
		}
	}
	if len(b.AllReduce) > 0 {
		ew.printf("    %-12s %10s %10s %10s %s\n", "all_reduce", "time µs", "algbw GB/s", "busbw GB/s", "ranks")
		for _, a := range b.AllReduce {
			ew.printf("    %-12s %10.1f %10.1f %10.1f %d\n", sizeString(a.Bytes), a.TimeUs, a.AlgBW, a.BusBW, a.Ranks)
		}
	}
	if len(b.Steps) > 0 {
		steps := append([]StepTime{}, b.Steps...)
		sort.SliceStable(steps, func(i, j int) bool { return steps[i].Seconds > steps[j].Seconds })
		var parts []string
		for _, s := range steps[:min(5, len(steps))] {
			parts = append(parts, fmt.Sprintf("%s %.2fs", s.Step, s.Seconds))
		}
		ew.printf("    slowest steps: %s\n", strings.Join(parts, ", "))
	}
}

func verified(bad int64) string {
	if bad > 0 {
		return fmt.Sprintf("WRONG (%d B)", bad)
	}
	return "yes"
}

// writeCross prints the all_reduce figures between node pairs.
func writeCross(ew *errWriter, cross []CrossResult) {
	if len(cross) == 0 {
		return
	}
	ew.printf("  all_reduce between nodes:\n")
	for _, r := range cross {
		pair := strings.Join(r.Hosts, "↔")
		if len(r.Figures) == 0 {
			ew.printf("    %-24s no figures\n", pair)
			continue
		}
		var parts []string
		for _, f := range r.Figures {
			parts = append(parts, fmt.Sprintf("%s %.3g", sizeString(f.Bytes), f.AlgBW))
		}
		ew.printf("    %-24s %s algbw GB/s: %s\n", pair, r.Figures[0].Backend, strings.Join(parts, ", "))
	}
}
