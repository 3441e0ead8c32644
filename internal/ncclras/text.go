package ncclras

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// The text report's lines, after their indentation, each with the format in
// src/ras/client_support.cc that prints it (rasClientRunInit,
// rasClientRunComms, rasClientBreakDownErrors). Where a "Rank ..." line goes
// on with " -- GPU %s managed by process %d on node %s" (or " -- [process
// information not found]"), that part is cut off first (processRE).
var (
	// "NCCL version " STR(NCCL_MAJOR) "." ... NCCL_SUFFIX " compiled with CUDA " ...
	versionRE = lazyre.New(`^NCCL version (\S+)`)
	// "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n": group, comms in group,
	// nodes per comm, ranks per node, ranks per comm, ranks in group,
	// status, errors.
	tableRowRE = lazyre.New(`^(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)$`)
	// "#%d-%d (%016lx) INCOMPLETE\n", "... ERROR\n", "... MISMATCH\n"
	sectionRE = lazyre.New(`^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)$`)
	// "GPU %s managed by process %d on node %s"
	processRE = lazyre.New(`^GPU (.+) managed by process (\d+) on node (\S+)$`)
	// "  Process %d on node %s managing GPU%s %s\n"
	unreachableRE = lazyre.New(`^Process (\d+) on node (\S+) managing GPUs? (.+)$`)
	// "  Missing communicator data from %d job process%s\n"
	missingProcsRE = lazyre.New(`^Missing communicator data from (\d+) job process(?:es)?$`)
	// "  %d job process%s considered dead (unreachable via the RAS network)\n"
	deadProcsRE = lazyre.New(`^(\d+) job process(?:es are| is) considered dead\b`)
	// "  Encountered %d communication timeout%s while gathering communicator data\n\n"
	timeoutsRE = lazyre.New(`^Encountered (\d+) communication timeouts? while gathering communicator data$`)
	// "  The missing rank%s: %s\n" (2.24, 2.25) and "  The unknown ranks: %s\n" (2.24, 2.25)
	rankListRE = lazyre.New(`^The (?:missing|unknown) ranks?: ([\d,]+)$`)
	// "  Communicator ranks have different %s operation counts\n"; before
	// 2.26 the literal "... different collective operation counts".
	opCountsRE = lazyre.New(`^Communicator ranks have different (\S+) operation counts$`)
	// "  %d ranks have launched up to operation %ld\n",
	// "  %d ranks have not launched any operations\n",
	// "  Rank %d has launched up to operation %ld -- ...",
	// "  Rank %d has not launched any operations -- ..."
	groupCountRE = lazyre.New(`^(\d+) ranks have (?:launched up to operation (\d+)|not launched any operations)$`)
	rankCountRE  = lazyre.New(`^Rank (\d+) has (?:launched up to operation (\d+)|not launched any operations)$`)
	// "  %d ranks have status %s\n", "  Rank %d has status %s -- ..."
	groupStatusRE = lazyre.New(`^(\d+) ranks have status (\S+)$`)
	rankStatusRE  = lazyre.New(`^Rank (\d+) has status (\S+)$`)
	// "  %d ranks reported %s\n", "  Rank %d reported %s -- ..."
	groupErrorRE = lazyre.New(`^(\d+) ranks reported .+$`)
	rankErrorRE  = lazyre.New(`^Rank (\d+) reported .+$`)
	// "  Rank %d -- ...": a member of the group above.
	rankRE = lazyre.New(`^Rank (\d+)$`)
)

// textParser reads the text report a line at a time.
type textParser struct {
	r      Report
	labels map[string]int // "#0-0" → index in r.Comms

	summary     int  // columns of the job summary's totals row to come: 5, 3, or 0
	table       bool // in the communicators table
	sawWarnings bool

	comm    int        // the communicator of the section being read, or -1
	inDead  bool       // in the DEAD section: named processes are dead
	op      string     // the collective type whose counts are being listed
	addRank func(int)  // where a "Rank %d -- ..." line's rank goes
	proc    func(Rank) // records a named rank's process in the current communicator
}

func parseText(text string) Report {
	p := textParser{labels: make(map[string]int), comm: -1}
	lines := strings.Split(text, "\n")
	// The report ends in a newline; a last line without one was cut short
	// and may read as something it was not ("Rank 1" of "Rank 12 ...").
	cut := !strings.HasSuffix(text, "\n")
	lines = lines[:len(lines)-1]
	for _, line := range lines {
		p.line(strings.TrimSpace(line))
	}
	p.r.Complete = p.sawWarnings && !cut
	return p.r
}

func (p *textParser) line(l string) {
	if p.summary != 0 {
		p.summaryRow(l)
		return
	}
	switch {
	case l == "":
		// Blank lines end the table and every section's groups.
		p.table, p.addRank = false, nil
		return
	case strings.HasPrefix(l, "(total)"):
		// The second header line of the job summary's totals: "(total)
		// per node  per process    (total)  (total)" when every node is
		// alike, "(total)    (total)      (total)" otherwise.
		p.summary = 3
		if strings.Contains(l, "per node") {
			p.summary = 5
		}
		return
	case strings.HasPrefix(l, "Group ") && strings.Contains(l, "Comms"):
		p.table = true
		return
	case l == "Errors" || l == "Warnings":
		p.table, p.comm, p.addRank = false, -1, nil
		p.sawWarnings = p.sawWarnings || l == "Warnings"
		return
	case l == "INCOMPLETE" || l == "DEAD" || l == "TIMEOUT":
		// Job-wide sections.
		p.comm, p.addRank, p.inDead = -1, nil, l == "DEAD"
		return
	}
	if p.table {
		if m := tableRowRE().FindStringSubmatch(l); m != nil {
			p.tableRow(m)
		}
		return
	}
	if m := versionRE().FindStringSubmatch(l); m != nil {
		p.r.NCCLVersion = m[1]
		return
	}
	if m := sectionRE().FindStringSubmatch(l); m != nil {
		p.section(m)
		return
	}
	if m := unreachableRE().FindStringSubmatch(l); m != nil {
		p.r.Unreachable = append(p.r.Unreachable, Process{PID: atoi(m[1]), Node: m[2], GPUs: m[3], Dead: p.inDead})
		return
	}
	if m := missingProcsRE().FindStringSubmatch(l); m != nil {
		p.r.MissingProcesses = atoi(m[1])
		return
	}
	if m := deadProcsRE().FindStringSubmatch(l); m != nil {
		p.r.DeadProcesses = atoi(m[1])
		return
	}
	if m := timeoutsRE().FindStringSubmatch(l); m != nil {
		p.r.Timeouts = atoi(m[1])
		return
	}
	if p.comm >= 0 {
		p.commLine(l)
	}
}

// summaryRow reads the job summary's totals.
func (p *textParser) summaryRow(l string) {
	f := strings.Fields(l)
	if len(f) == p.summary {
		n := make([]int, len(f))
		for i, s := range f {
			n[i] = atoi(s)
		}
		if p.summary == 5 { // nodes, processes per node, GPUs per process, processes, GPUs
			p.r.Nodes, p.r.Processes, p.r.GPUs = n[0], n[3], n[4]
		} else { // nodes, processes, GPUs
			p.r.Nodes, p.r.Processes, p.r.GPUs = n[0], n[1], n[2]
		}
	}
	p.summary = 0
}

// tableRow makes a Comm of each communicator of one row of the table.
func (p *textParser) tableRow(m []string) {
	group, n := atoi(m[1]), min(atoi(m[2]), maxComms-len(p.r.Comms))
	for i := range n {
		c := &p.r.Comms[p.commIndex(group, i)]
		c.Nodes, c.Size, c.Status, c.Errors = atoi(m[3]), atoi(m[5]), m[7], m[8]
	}
}

// commIndex finds the communicator labelled #group-i, adding it when new
// (a section may name one the table did not list, if the table was lost).
func (p *textParser) commIndex(group, i int) int {
	label := fmt.Sprintf("#%d-%d", group, i)
	if ci, ok := p.labels[label]; ok {
		return ci
	}
	p.r.Comms = append(p.r.Comms, Comm{Label: label})
	p.labels[label] = len(p.r.Comms) - 1
	return len(p.r.Comms) - 1
}

// section starts a "#g-i (hash) KIND" section about one communicator.
func (p *textParser) section(m []string) {
	ci := p.commIndex(atoi(m[1]), atoi(m[2]))
	if h, err := strconv.ParseUint(m[3], 16, 64); err == nil {
		p.r.Comms[ci].Hash = fmt.Sprintf("%016x", h)
	}
	p.comm, p.op, p.addRank = ci, "", nil
	p.proc = func(rk Rank) { p.r.Comms[ci].Ranks = append(p.r.Comms[ci].Ranks, rk) }
	if m[4] == "INCOMPLETE" {
		// Since 2.26 the missing ranks follow one a line.
		p.addRank = func(rank int) { p.r.Comms[ci].Missing = append(p.r.Comms[ci].Missing, rank) }
	}
}

// commLine reads a line of a communicator's section.
func (p *textParser) commLine(l string) {
	ci := p.comm
	c := func() *Comm { return &p.r.Comms[ci] } // r.Comms does not grow within a section
	head, tail, _ := strings.Cut(l, " -- ")
	if m := rankRE().FindStringSubmatch(head); m != nil {
		p.rankProcess(atoi(m[1]), tail)
		if p.addRank != nil {
			p.addRank(atoi(m[1]))
		}
		return
	}
	if m := rankListRE().FindStringSubmatch(head); m != nil {
		for s := range strings.SplitSeq(m[1], ",") {
			if s == "" {
				continue
			}
			if p.addRank != nil {
				p.addRank(atoi(s))
			}
		}
		return
	}
	if m := opCountsRE().FindStringSubmatch(head); m != nil {
		p.op, p.addRank = m[1], nil
		return
	}
	if head == "Communicator ranks have different status" {
		p.op, p.addRank = "", nil
		return
	}
	if m := groupCountRE().FindStringSubmatch(head); m != nil {
		i := len(c().Counts)
		c().Counts = append(c().Counts, Count{Op: p.op, Count: atou(m[2]), NRanks: atoi(m[1])})
		p.addRank = func(rank int) { p.r.Comms[ci].Counts[i].Ranks = append(p.r.Comms[ci].Counts[i].Ranks, rank) }
		return
	}
	if m := rankCountRE().FindStringSubmatch(head); m != nil {
		rank := atoi(m[1])
		c().Counts = append(c().Counts, Count{Op: p.op, Count: atou(m[2]), NRanks: 1, Ranks: []int{rank}})
		p.rankProcess(rank, tail)
		p.addRank = nil
		return
	}
	if m := groupStatusRE().FindStringSubmatch(head); m != nil {
		i := len(c().Statuses)
		c().Statuses = append(c().Statuses, Status{Status: m[2], NRanks: atoi(m[1])})
		p.addRank = func(rank int) { p.r.Comms[ci].Statuses[i].Ranks = append(p.r.Comms[ci].Statuses[i].Ranks, rank) }
		return
	}
	if m := rankStatusRE().FindStringSubmatch(head); m != nil {
		rank := atoi(m[1])
		c().Statuses = append(c().Statuses, Status{Status: m[2], NRanks: 1, Ranks: []int{rank}})
		p.rankProcess(rank, tail)
		p.addRank = nil
		return
	}
	if groupErrorRE().MatchString(head) {
		p.addRank = func(rank int) { p.r.Comms[ci].Failed = append(p.r.Comms[ci].Failed, rank) }
		return
	}
	if m := rankErrorRE().FindStringSubmatch(head); m != nil {
		rank := atoi(m[1])
		c().Failed = append(c().Failed, rank)
		p.rankProcess(rank, tail)
		p.addRank = nil
		return
	}
	if strings.HasPrefix(head, "Initialization error") || strings.HasPrefix(head, "Asynchronous error") {
		p.addRank = nil
	}
}

// rankProcess records the process a "Rank %d -- GPU ..." line names.
func (p *textParser) rankProcess(rank int, tail string) {
	if m := processRE().FindStringSubmatch(tail); m != nil && p.proc != nil {
		p.proc(Rank{Rank: rank, Node: m[3], PID: atoi(m[2]), GPU: m[1]})
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func atou(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}
