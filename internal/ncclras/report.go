package ncclras

import (
	"cmp"
	"slices"
	"strings"
)

// Report is what Parse reads from a RAS status report.
type Report struct {
	NCCLVersion string // "2.26.2", as the report's first line or nccl_version gives it
	JSON        bool   // the report was NCCL's JSON dump, which gives every rank's counts
	// Complete is set when the report reached its end: the text report's
	// last section (Warnings) or the JSON document's closing brace.
	Complete bool

	// The job summary of the text report; 0 where it is not given (JSON).
	Nodes, Processes, GPUs int

	Comms []Comm

	MissingProcesses int       // processes that did not answer RAS this time
	DeadProcesses    int       // processes RAS gave up on (unreachable for 60s)
	Unreachable      []Process // those of them the report names
	// Timeouts counts RAS's own communication timeouts while it gathered
	// the data: some of it is missing.
	Timeouts int
}

// Comm is one NCCL communicator as the report describes it. The text
// report groups alike communicators into one row of its table and names one
// (as "#group-index (hash)") only when something is wrong with it; Parse
// makes a Comm of each, with the row's values.
type Comm struct {
	Label  string // "#0-0": the row of the text report's table and the index in it; "" from JSON
	Hash   string // the commHash in 16 hex digits, as NCCL's debug output prints it; "" when not named
	Size   int    // ranks in the communicator
	Nodes  int    // nodes its (responding) ranks run on
	Status string // RUNNING, INIT, FINALIZE, ABORT; NOCOMM (UNKNOWN before 2.26) for ranks not in it
	Errors string // OK, or a list of INCOMPLETE, ERROR, MISMATCH

	Counts   []Count  // collective counts, where the report gives them
	Statuses []Status // the ranks' states, where they differ (text) or always (JSON)
	Missing  []int    // ranks NCCL got no data from, where named
	Failed   []int    // ranks that reported an initialization or asynchronous error, where named
	Ranks    []Rank   // the ranks whose process the report names, sorted by Rank
}

// Count is NRanks ranks of a communicator that all launched Count
// collectives of type Op. The text report gives counts only for the types
// whose counts differ between ranks, and names the ranks of a count only
// when they are few (NCCL's outliers); JSON gives them all.
type Count struct {
	Op     string // "AllReduce", ...; "collective" before NCCL 2.26, which counted every type together
	Count  uint64
	NRanks int
	Ranks  []int
}

// Status is NRanks ranks of a communicator in one state; Ranks as in
// Count.
type Status struct {
	Status string
	NRanks int
	Ranks  []int
}

// Rank is a rank of a communicator and the process that runs it.
type Rank struct {
	Rank int
	Node string // the node's IP address, as RAS knows it
	PID  int
	GPU  string // CUDA device, and the NVML one when it differs: "3" or "3 (NVML 5)"
}

// Process is a process RAS could not reach.
type Process struct {
	PID  int
	Node string
	GPUs string // "0,1", "5 (NVML 7)"
	Dead bool   // RAS gave up on it
}

// TotalCollectives sums the collectives launched by every rank of every
// communicator: if the sum grows from one query to the next, the job
// progresses. exact is false unless the report is a complete JSON dump: the
// text report gives counts only where ranks disagree.
func (r Report) TotalCollectives() (total uint64, exact bool) {
	for _, c := range r.Comms {
		for _, n := range c.Counts {
			total += n.Count * uint64(n.NRanks)
		}
	}
	return total, r.JSON && r.Complete
}

// Lagging returns the global ranks that hold the job back, sorted: those of
// every communicator's Lagging. In a communicator of the whole job (the
// largest) a rank is the global rank; a rank of a smaller one is translated
// through its process, where the report names the process in both, and
// left out where it does not.
func (r Report) Lagging() []int {
	world := 0
	for _, c := range r.Comms {
		world = max(world, c.Size)
	}
	global := make(map[Rank]int)
	for _, c := range r.Comms {
		if c.Size != world {
			continue
		}
		for _, rk := range c.Ranks {
			if rk.PID != 0 {
				global[processOf(rk)] = rk.Rank
			}
		}
	}
	var out []int
	for _, c := range r.Comms {
		for _, rank := range c.Lagging() {
			if c.Size == world {
				out = append(out, rank)
				continue
			}
			if rk, ok := c.rank(rank); ok && rk.PID != 0 {
				if g, ok := global[processOf(rk)]; ok {
					out = append(out, g)
				}
			}
		}
	}
	return sortedUnique(out)
}

// Lagging returns the communicator's ranks that hold it back, sorted: the
// missing ones, those that launched fewer collectives of a type than most
// of its ranks, and those in a different state from most of them. Ranks of
// a large group that the report does not name cannot be listed.
func (c Comm) Lagging() []int {
	out := slices.Clone(c.Missing)
	modes := make(map[string]Count)
	for _, n := range c.Counts {
		// The most common count; of two as common, the higher, as NCCL
		// lists them.
		if m, ok := modes[n.Op]; !ok || n.NRanks > m.NRanks || n.NRanks == m.NRanks && n.Count > m.Count {
			modes[n.Op] = n
		}
	}
	for _, n := range c.Counts {
		if n.Count < modes[n.Op].Count {
			out = append(out, n.Ranks...)
		}
	}
	var mode Status
	for _, s := range c.Statuses {
		if s.NRanks > mode.NRanks {
			mode = s
		}
	}
	for _, s := range c.Statuses {
		if s.Status != mode.Status {
			out = append(out, s.Ranks...)
		}
	}
	return sortedUnique(out)
}

// rank finds the named rank's process.
func (c Comm) rank(rank int) (Rank, bool) {
	i, ok := slices.BinarySearchFunc(c.Ranks, rank, func(rk Rank, r int) int { return cmp.Compare(rk.Rank, r) })
	if !ok {
		return Rank{}, false
	}
	return c.Ranks[i], true
}

// processOf is the rank's process and GPU, the same in every
// communicator the rank is in.
func processOf(rk Rank) Rank {
	rk.Rank = 0
	return rk
}

func sortedUnique(s []int) []int {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// Parse reads a RAS status report, text or JSON. It never fails: lines
// and fields it does not know are skipped, and a report cut short gives
// what it has, with Complete unset.
func Parse(text string) Report {
	var r Report
	if strings.HasPrefix(strings.TrimLeft(text, " \t\r\n"), "{") {
		r = parseJSON(text)
	} else {
		r = parseText(text)
	}
	for i := range r.Comms {
		c := &r.Comms[i]
		slices.SortStableFunc(c.Ranks, func(a, b Rank) int { return cmp.Compare(a.Rank, b.Rank) })
		c.Ranks = slices.CompactFunc(c.Ranks, func(a, b Rank) bool { return a.Rank == b.Rank })
		c.Missing = sortedUnique(c.Missing)
		c.Failed = sortedUnique(c.Failed)
	}
	return r
}
