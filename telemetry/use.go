package telemetry

import (
	"maps"
	"slices"
)

// Use is what telemetry saw of one rank's GPU in one attempt: the means
// of its samples, and how often each clock-event reason held its clocks.
type Use struct {
	Node    string
	GPU     int
	Samples int
	// SMPct and PowerW are the means of the samples that had the reading;
	// HaveSM and HavePower say whether any had.
	SMPct, PowerW     float64
	HaveSM, HavePower bool
	// Reasons counts the samples in which each clock-event reason was
	// active.
	Reasons map[string]int
}

// ReasonsIn are the clock-event reasons active in at least share (0 to
// 1) of the samples, most frequent first.
func (u Use) ReasonsIn(share float64) []string {
	var out []string
	for _, r := range slices.Sorted(maps.Keys(u.Reasons)) {
		if float64(u.Reasons[r]) >= share*float64(u.Samples) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return u.Reasons[b] - u.Reasons[a] })
	return out
}

// RankUse gathers Use by attempt and global rank, as samples come. It is
// not safe for concurrent use: the head's telemetry hook holds its lock.
type RankUse struct {
	by map[[2]int]*useSums
}

type useSums struct {
	use         Use
	sm, power   float64
	nSM, nPower int
}

// NewRankUse returns an empty RankUse.
func NewRankUse() *RankUse { return &RankUse{by: map[[2]int]*useSums{}} }

// Observe adds s to the Use of every rank on its GPU (none where its ranks
// are not known).
func (r *RankUse) Observe(s Sample) {
	for _, rank := range s.Ranks {
		if rank < 0 {
			continue
		}
		k := [2]int{s.Attempt, rank}
		u := r.by[k]
		if u == nil {
			u = &useSums{use: Use{Node: s.Node, GPU: s.GPU, Reasons: map[string]int{}}}
			r.by[k] = u
		}
		u.use.Samples++
		if s.SMPct != nil {
			u.sm += *s.SMPct
			u.nSM++
		}
		if s.PowerW != nil {
			u.power += *s.PowerW
			u.nPower++
		}
		for _, reason := range s.ClockReasons {
			u.use.Reasons[reason]++
		}
	}
}

// Get is rank's Use in attempt (from 1, as Sample.Attempt numbers it).
func (r *RankUse) Get(attempt, rank int) (Use, bool) {
	u := r.by[[2]int{attempt, rank}]
	if u == nil || u.use.Samples == 0 {
		return Use{}, false
	}
	out := u.use
	out.Reasons = maps.Clone(u.use.Reasons)
	if u.nSM > 0 {
		out.SMPct, out.HaveSM = u.sm/float64(u.nSM), true
	}
	if u.nPower > 0 {
		out.PowerW, out.HavePower = u.power/float64(u.nPower), true
	}
	return out, true
}
