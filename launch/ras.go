package launch

// A client for NCCL's RAS subsystem (NCCL >= 2.24, on by default). Every NCCL
// process of a job runs a RAS thread; the first one on a node binds
// NCCL_RAS_ADDR (default localhost:28028) and answers a line-based text
// protocol with a report on every communicator of the whole job, gathered
// from all its processes. The protocol and the report formats below are
// NCCL's: the client side is src/ras/client.cc (ncclras), the server side
// src/ras/client_support.cc (rasClientEventLoop, rasClientRunInit,
// rasClientRunComms, rasDumpCommsToJSON).
//
// A hang shows in the report as a communicator whose ranks launched
// different numbers of collectives (the one that did not join is behind),
// as ranks NCCL got no data from (the process is stopped or gone), or as
// ranks in a different state from the rest.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultRASAddr is where NCCL's RAS threads listen when NCCL_RAS_ADDR is
// not set (NCCL_RAS_CLIENT_PORT in src/ras/ras_internal.h).
const DefaultRASAddr = "localhost:28028"

const (
	// rasProtocol is NCCL_RAS_CLIENT_PROTOCOL. The server answers with its
	// own version and ignores ours; ncclras only warns on a mismatch, and so
	// the version is not checked here either.
	rasProtocol = 2

	// rasDefaultTimeout and rasExtraTimeout are RAS_COLLECTIVE_LEG_TIMEOUT_SEC
	// and RAS_COLLECTIVE_EXTRA_TIMEOUT_SEC: NCCL waits for unresponsive
	// processes up to the (TIMEOUT) leg timeout plus the extra one.
	rasDefaultTimeout = 5 * time.Second
	rasExtraTimeout   = 5 * time.Second

	// rasMaxReport bounds what QueryRAS reads: a JSON dump takes about 700
	// bytes a rank, so this is room for some 90,000 ranks.
	rasMaxReport = 64 << 20

	// rasMaxComms bounds how many communicators ParseRAS makes of the rows
	// of the text report's table, so that garbled counts cannot make it
	// allocate without end.
	rasMaxComms = 1 << 16
)

// QueryRAS asks the NCCL RAS server at addr (DefaultRASAddr when empty; the
// caller knows the job's NCCL_RAS_ADDR) for the status of the job and
// returns the text report, the one ncclras prints; verbose asks for VERBOSE
// STATUS, which names more of the outlying ranks. It gives up at ctx's
// deadline, and asks NCCL to stop waiting for unresponsive processes in time
// to answer before it. When the report is cut short, the text read so far is
// returned with the error: ParseRAS reads what it can of it. QueryRAS keeps
// no state between calls, so calls may run at once.
func QueryRAS(ctx context.Context, addr string, verbose bool) (string, error) {
	return queryRAS(ctx, addr, verbose, false)
}

// QueryRASJSON is QueryRAS asking for NCCL's JSON dump (SET FORMAT json,
// NCCL >= 2.28.7), the only form that gives every rank's collective counts
// even when they agree. An older server refuses the command, and then the
// text report is returned instead; ParseRAS reads both.
func QueryRASJSON(ctx context.Context, addr string) (string, error) {
	return queryRAS(ctx, addr, false, true)
}

func queryRAS(ctx context.Context, addr string, verbose, asJSON bool) (string, error) {
	if addr == "" {
		addr = DefaultRASAddr
	}
	fail := func(err error) error {
		return fmt.Errorf("nccl ras at %s: %w", addr, rasCause(ctx, err))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fail(err)
	}
	defer conn.Close()
	// Every read and write below blocks on the connection, so ctx reaches
	// them as a connection deadline: its own, or one in the past the moment
	// it is cancelled.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	br := bufio.NewReader(conn)
	// exchange sends one command and reads its one-line answer, the way
	// ncclras does before it asks for the status.
	exchange := func(cmd string) (string, error) {
		if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
			return "", fmt.Errorf("send %s: %w", cmd, err)
		}
		// ReadSlice bounds the answer by the reader's buffer.
		line, err := br.ReadSlice('\n')
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("connection closed: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return "", fmt.Errorf("answer to %s: %w", cmd, err)
		}
		return strings.TrimRight(string(line), "\r\n"), nil
	}

	hello := fmt.Sprintf("CLIENT PROTOCOL %d", rasProtocol)
	reply, err := exchange(hello)
	if err != nil {
		return "", fail(err)
	}
	if !hasPrefixFold(reply, "SERVER PROTOCOL ") {
		return "", fail(fmt.Errorf("unexpected answer %q to %s", reply, hello))
	}
	if secs, ok := rasTimeout(ctx); ok {
		cmd := fmt.Sprintf("TIMEOUT %d", secs)
		if reply, err = exchange(cmd); err != nil {
			return "", fail(err)
		}
		if !strings.EqualFold(reply, "OK") {
			return "", fail(fmt.Errorf("unexpected answer %q to %s", reply, cmd))
		}
	}
	if asJSON {
		// Servers before 2.28.7 answer "ERROR: Unknown command ...": the
		// text report it is then.
		if _, err = exchange("SET FORMAT json"); err != nil {
			return "", fail(err)
		}
	}
	cmd := "STATUS"
	if verbose {
		cmd = "VERBOSE STATUS"
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", fail(fmt.Errorf("send %s: %w", cmd, err))
	}
	// The server sends the report in pieces as its data comes in, and
	// closes the connection after the last one.
	report, err := io.ReadAll(io.LimitReader(br, rasMaxReport+1))
	if err != nil {
		return string(report), fail(fmt.Errorf("read report: %w", err))
	}
	if len(report) > rasMaxReport {
		return string(report[:rasMaxReport]), fail(fmt.Errorf("report longer than %d bytes", rasMaxReport))
	}
	return string(report), nil
}

// rasTimeout is the TIMEOUT to send so that NCCL answers, with what it has,
// before ctx's deadline; ok is false when NCCL's default already fits. A
// second is left for the report to travel.
func rasTimeout(ctx context.Context) (secs int, ok bool) {
	dl, has := ctx.Deadline()
	if !has {
		return 0, false
	}
	left := time.Until(dl) - rasExtraTimeout - time.Second
	if left >= rasDefaultTimeout {
		return 0, false
	}
	// Whole seconds, as older servers parse it with strtol; and never 0,
	// which turns NCCL's timeout off.
	return max(1, int(left/time.Second)), true
}

// rasCause prefers ctx's error, so that callers can match
// context.DeadlineExceeded and context.Canceled. The connection deadline
// set from ctx can fire a moment before ctx reports it.
func rasCause(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
	if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// RASReport is what ParseRAS reads from a RAS status report.
type RASReport struct {
	NCCLVersion string // "2.26.2", as the report's first line or nccl_version gives it
	JSON        bool   // the report was NCCL's JSON dump, which gives every rank's counts
	// Complete is set when the report reached its end: the text report's
	// last section (Warnings) or the JSON document's closing brace.
	Complete bool

	// The job summary of the text report; 0 where it is not given (JSON).
	Nodes, Processes, GPUs int

	Comms []RASComm

	MissingProcesses int          // processes that did not answer RAS this time
	DeadProcesses    int          // processes RAS gave up on (unreachable for 60s)
	Unreachable      []RASProcess // those of them the report names
	// Timeouts counts RAS's own communication timeouts while it gathered
	// the data: some of it is missing.
	Timeouts int
}

// RASComm is one NCCL communicator as the report describes it. The text
// report groups alike communicators into one row of its table and names one
// (as "#group-index (hash)") only when something is wrong with it; ParseRAS
// makes a RASComm of each, with the row's values.
type RASComm struct {
	Label  string // "#0-0": the row of the text report's table and the index in it; "" from JSON
	Hash   string // the commHash in 16 hex digits, as NCCL's debug output prints it; "" when not named
	Size   int    // ranks in the communicator
	Nodes  int    // nodes its (responding) ranks run on
	Status string // RUNNING, INIT, FINALIZE, ABORT; NOCOMM (UNKNOWN before 2.26) for ranks not in it
	Errors string // OK, or a list of INCOMPLETE, ERROR, MISMATCH

	Counts   []RASCount  // collective counts, where the report gives them
	Statuses []RASStatus // the ranks' states, where they differ (text) or always (JSON)
	Missing  []int       // ranks NCCL got no data from, where named
	Failed   []int       // ranks that reported an initialization or asynchronous error, where named
	Ranks    []RASRank   // the ranks whose process the report names, sorted by Rank
}

// RASCount is NRanks ranks of a communicator that all launched Count
// collectives of type Op. The text report gives counts only for the types
// whose counts differ between ranks, and names the ranks of a count only
// when they are few (NCCL's outliers); JSON gives them all.
type RASCount struct {
	Op     string // "AllReduce", ...; "collective" before NCCL 2.26, which counted every type together
	Count  uint64
	NRanks int
	Ranks  []int
}

// RASStatus is NRanks ranks of a communicator in one state; Ranks as in
// RASCount.
type RASStatus struct {
	Status string
	NRanks int
	Ranks  []int
}

// RASRank is a rank of a communicator and the process that runs it.
type RASRank struct {
	Rank int
	Node string // the node's IP address, as RAS knows it
	PID  int
	GPU  string // CUDA device, and the NVML one when it differs: "3" or "3 (NVML 5)"
}

// RASProcess is a process RAS could not reach.
type RASProcess struct {
	PID  int
	Node string
	GPUs string // "0,1", "5 (NVML 7)"
	Dead bool   // RAS gave up on it
}

// TotalCollectives sums the collectives launched by every rank of every
// communicator: if the sum grows from one query to the next, the job
// progresses. exact is false unless the report is a complete JSON dump: the
// text report gives counts only where ranks disagree.
func (r RASReport) TotalCollectives() (total uint64, exact bool) {
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
func (r RASReport) Lagging() []int {
	world := 0
	for _, c := range r.Comms {
		world = max(world, c.Size)
	}
	global := make(map[RASRank]int)
	for _, c := range r.Comms {
		if c.Size != world {
			continue
		}
		for _, rk := range c.Ranks {
			if rk.PID != 0 {
				global[rasProcessOf(rk)] = rk.Rank
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
				if g, ok := global[rasProcessOf(rk)]; ok {
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
func (c RASComm) Lagging() []int {
	out := slices.Clone(c.Missing)
	modes := make(map[string]RASCount)
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
	var mode RASStatus
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
func (c RASComm) rank(rank int) (RASRank, bool) {
	i, ok := slices.BinarySearchFunc(c.Ranks, rank, func(rk RASRank, r int) int { return cmp.Compare(rk.Rank, r) })
	if !ok {
		return RASRank{}, false
	}
	return c.Ranks[i], true
}

// rasProcessOf is the rank's process and GPU, the same in every
// communicator the rank is in.
func rasProcessOf(rk RASRank) RASRank {
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

// ParseRAS reads a RAS status report, text or JSON. It never fails: lines
// and fields it does not know are skipped, and a report cut short gives
// what it has, with Complete unset.
func ParseRAS(text string) RASReport {
	var r RASReport
	if strings.HasPrefix(strings.TrimLeft(text, " \t\r\n"), "{") {
		r = parseRASJSON(text)
	} else {
		r = parseRASText(text)
	}
	for i := range r.Comms {
		c := &r.Comms[i]
		slices.SortStableFunc(c.Ranks, func(a, b RASRank) int { return cmp.Compare(a.Rank, b.Rank) })
		c.Ranks = slices.CompactFunc(c.Ranks, func(a, b RASRank) bool { return a.Rank == b.Rank })
		c.Missing = sortedUnique(c.Missing)
		c.Failed = sortedUnique(c.Failed)
	}
	return r
}

// The text report's lines, after their indentation, each with the format in
// src/ras/client_support.cc that prints it (rasClientRunInit,
// rasClientRunComms, rasClientBreakDownErrors). Where a "Rank ..." line goes
// on with " -- GPU %s managed by process %d on node %s" (or " -- [process
// information not found]"), that part is cut off first (rasProcessRE).
var (
	// "NCCL version " STR(NCCL_MAJOR) "." ... NCCL_SUFFIX " compiled with CUDA " ...
	rasVersionRE = regexp.MustCompile(`^NCCL version (\S+)`)
	// "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n": group, comms in group,
	// nodes per comm, ranks per node, ranks per comm, ranks in group,
	// status, errors.
	rasTableRowRE = regexp.MustCompile(`^(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)$`)
	// "#%d-%d (%016lx) INCOMPLETE\n", "... ERROR\n", "... MISMATCH\n"
	rasSectionRE = regexp.MustCompile(`^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)$`)
	// "GPU %s managed by process %d on node %s"
	rasProcessRE = regexp.MustCompile(`^GPU (.+) managed by process (\d+) on node (\S+)$`)
	// "  Process %d on node %s managing GPU%s %s\n"
	rasUnreachableRE = regexp.MustCompile(`^Process (\d+) on node (\S+) managing GPUs? (.+)$`)
	// "  Missing communicator data from %d job process%s\n"
	rasMissingProcsRE = regexp.MustCompile(`^Missing communicator data from (\d+) job process(?:es)?$`)
	// "  %d job process%s considered dead (unreachable via the RAS network)\n"
	rasDeadProcsRE = regexp.MustCompile(`^(\d+) job process(?:es are| is) considered dead\b`)
	// "  Encountered %d communication timeout%s while gathering communicator data\n\n"
	rasTimeoutsRE = regexp.MustCompile(`^Encountered (\d+) communication timeouts? while gathering communicator data$`)
	// "  The missing rank%s: %s\n" (2.24, 2.25) and "  The unknown ranks: %s\n" (2.24, 2.25)
	rasRankListRE = regexp.MustCompile(`^The (?:missing|unknown) ranks?: ([\d,]+)$`)
	// "  Communicator ranks have different %s operation counts\n"; before
	// 2.26 the literal "... different collective operation counts".
	rasOpCountsRE = regexp.MustCompile(`^Communicator ranks have different (\S+) operation counts$`)
	// "  %d ranks have launched up to operation %ld\n",
	// "  %d ranks have not launched any operations\n",
	// "  Rank %d has launched up to operation %ld -- ...",
	// "  Rank %d has not launched any operations -- ..."
	rasGroupCountRE = regexp.MustCompile(`^(\d+) ranks have (?:launched up to operation (\d+)|not launched any operations)$`)
	rasRankCountRE  = regexp.MustCompile(`^Rank (\d+) has (?:launched up to operation (\d+)|not launched any operations)$`)
	// "  %d ranks have status %s\n", "  Rank %d has status %s -- ..."
	rasGroupStatusRE = regexp.MustCompile(`^(\d+) ranks have status (\S+)$`)
	rasRankStatusRE  = regexp.MustCompile(`^Rank (\d+) has status (\S+)$`)
	// "  %d ranks reported %s\n", "  Rank %d reported %s -- ..."
	rasGroupErrorRE = regexp.MustCompile(`^(\d+) ranks reported .+$`)
	rasRankErrorRE  = regexp.MustCompile(`^Rank (\d+) reported .+$`)
	// "  Rank %d -- ...": a member of the group above.
	rasRankRE = regexp.MustCompile(`^Rank (\d+)$`)
)

// rasTextParser reads the text report a line at a time.
type rasTextParser struct {
	r      RASReport
	labels map[string]int // "#0-0" → index in r.Comms

	summary     int  // columns of the job summary's totals row to come: 5, 3, or 0
	table       bool // in the communicators table
	sawWarnings bool

	comm    int           // the communicator of the section being read, or -1
	inDead  bool          // in the DEAD section: named processes are dead
	op      string        // the collective type whose counts are being listed
	addRank func(int)     // where a "Rank %d -- ..." line's rank goes
	proc    func(RASRank) // records a named rank's process in the current communicator
}

func parseRASText(text string) RASReport {
	p := rasTextParser{labels: make(map[string]int), comm: -1}
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

func (p *rasTextParser) line(l string) {
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
		if m := rasTableRowRE.FindStringSubmatch(l); m != nil {
			p.tableRow(m)
		}
		return
	}
	if m := rasVersionRE.FindStringSubmatch(l); m != nil {
		p.r.NCCLVersion = m[1]
		return
	}
	if m := rasSectionRE.FindStringSubmatch(l); m != nil {
		p.section(m)
		return
	}
	if m := rasUnreachableRE.FindStringSubmatch(l); m != nil {
		p.r.Unreachable = append(p.r.Unreachable, RASProcess{PID: rasAtoi(m[1]), Node: m[2], GPUs: m[3], Dead: p.inDead})
		return
	}
	if m := rasMissingProcsRE.FindStringSubmatch(l); m != nil {
		p.r.MissingProcesses = rasAtoi(m[1])
		return
	}
	if m := rasDeadProcsRE.FindStringSubmatch(l); m != nil {
		p.r.DeadProcesses = rasAtoi(m[1])
		return
	}
	if m := rasTimeoutsRE.FindStringSubmatch(l); m != nil {
		p.r.Timeouts = rasAtoi(m[1])
		return
	}
	if p.comm >= 0 {
		p.commLine(l)
	}
}

// summaryRow reads the job summary's totals.
func (p *rasTextParser) summaryRow(l string) {
	f := strings.Fields(l)
	if len(f) == p.summary {
		n := make([]int, len(f))
		for i, s := range f {
			n[i] = rasAtoi(s)
		}
		if p.summary == 5 { // nodes, processes per node, GPUs per process, processes, GPUs
			p.r.Nodes, p.r.Processes, p.r.GPUs = n[0], n[3], n[4]
		} else { // nodes, processes, GPUs
			p.r.Nodes, p.r.Processes, p.r.GPUs = n[0], n[1], n[2]
		}
	}
	p.summary = 0
}

// tableRow makes a RASComm of each communicator of one row of the table.
func (p *rasTextParser) tableRow(m []string) {
	group, n := rasAtoi(m[1]), min(rasAtoi(m[2]), rasMaxComms-len(p.r.Comms))
	for i := range n {
		c := &p.r.Comms[p.commIndex(group, i)]
		c.Nodes, c.Size, c.Status, c.Errors = rasAtoi(m[3]), rasAtoi(m[5]), m[7], m[8]
	}
}

// commIndex finds the communicator labelled #group-i, adding it when new
// (a section may name one the table did not list, if the table was lost).
func (p *rasTextParser) commIndex(group, i int) int {
	label := fmt.Sprintf("#%d-%d", group, i)
	if ci, ok := p.labels[label]; ok {
		return ci
	}
	p.r.Comms = append(p.r.Comms, RASComm{Label: label})
	p.labels[label] = len(p.r.Comms) - 1
	return len(p.r.Comms) - 1
}

// section starts a "#g-i (hash) KIND" section about one communicator.
func (p *rasTextParser) section(m []string) {
	ci := p.commIndex(rasAtoi(m[1]), rasAtoi(m[2]))
	if h, err := strconv.ParseUint(m[3], 16, 64); err == nil {
		p.r.Comms[ci].Hash = fmt.Sprintf("%016x", h)
	}
	p.comm, p.op, p.addRank = ci, "", nil
	p.proc = func(rk RASRank) { p.r.Comms[ci].Ranks = append(p.r.Comms[ci].Ranks, rk) }
	if m[4] == "INCOMPLETE" {
		// Since 2.26 the missing ranks follow one a line.
		p.addRank = func(rank int) { p.r.Comms[ci].Missing = append(p.r.Comms[ci].Missing, rank) }
	}
}

// commLine reads a line of a communicator's section.
func (p *rasTextParser) commLine(l string) {
	ci := p.comm
	c := func() *RASComm { return &p.r.Comms[ci] } // r.Comms does not grow within a section
	head, tail, _ := strings.Cut(l, " -- ")
	if m := rasRankRE.FindStringSubmatch(head); m != nil {
		p.rankProcess(rasAtoi(m[1]), tail)
		if p.addRank != nil {
			p.addRank(rasAtoi(m[1]))
		}
		return
	}
	if m := rasRankListRE.FindStringSubmatch(head); m != nil {
		for s := range strings.SplitSeq(m[1], ",") {
			if s == "" {
				continue
			}
			if p.addRank != nil {
				p.addRank(rasAtoi(s))
			}
		}
		return
	}
	if m := rasOpCountsRE.FindStringSubmatch(head); m != nil {
		p.op, p.addRank = m[1], nil
		return
	}
	if head == "Communicator ranks have different status" {
		p.op, p.addRank = "", nil
		return
	}
	if m := rasGroupCountRE.FindStringSubmatch(head); m != nil {
		i := len(c().Counts)
		c().Counts = append(c().Counts, RASCount{Op: p.op, Count: rasAtou(m[2]), NRanks: rasAtoi(m[1])})
		p.addRank = func(rank int) { p.r.Comms[ci].Counts[i].Ranks = append(p.r.Comms[ci].Counts[i].Ranks, rank) }
		return
	}
	if m := rasRankCountRE.FindStringSubmatch(head); m != nil {
		rank := rasAtoi(m[1])
		c().Counts = append(c().Counts, RASCount{Op: p.op, Count: rasAtou(m[2]), NRanks: 1, Ranks: []int{rank}})
		p.rankProcess(rank, tail)
		p.addRank = nil
		return
	}
	if m := rasGroupStatusRE.FindStringSubmatch(head); m != nil {
		i := len(c().Statuses)
		c().Statuses = append(c().Statuses, RASStatus{Status: m[2], NRanks: rasAtoi(m[1])})
		p.addRank = func(rank int) { p.r.Comms[ci].Statuses[i].Ranks = append(p.r.Comms[ci].Statuses[i].Ranks, rank) }
		return
	}
	if m := rasRankStatusRE.FindStringSubmatch(head); m != nil {
		rank := rasAtoi(m[1])
		c().Statuses = append(c().Statuses, RASStatus{Status: m[2], NRanks: 1, Ranks: []int{rank}})
		p.rankProcess(rank, tail)
		p.addRank = nil
		return
	}
	if rasGroupErrorRE.MatchString(head) {
		p.addRank = func(rank int) { p.r.Comms[ci].Failed = append(p.r.Comms[ci].Failed, rank) }
		return
	}
	if m := rasRankErrorRE.FindStringSubmatch(head); m != nil {
		rank := rasAtoi(m[1])
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
func (p *rasTextParser) rankProcess(rank int, tail string) {
	if m := rasProcessRE.FindStringSubmatch(tail); m != nil && p.proc != nil {
		p.proc(RASRank{Rank: rank, Node: m[3], PID: rasAtoi(m[2]), GPU: m[1]})
	}
}

func rasAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func rasAtou(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// The JSON dump, as src/ras/client_support.cc writes it (rasDumpCommsToJSON,
// jsonWriteHeader, jsonStartCommunicator, jsonWriteRankData,
// jsonWriteMissingRank, jsonWriteFooter).
type rasJSONComm struct {
	Hash  string `json:"hash"` // "0x%lx"
	Size  int    `json:"size"`
	Ranks []struct {
		rasJSONProcess
		Status struct {
			InitState      int  `json:"init_state"`
			AsyncError     int  `json:"async_error"`
			FinalizeCalled bool `json:"finalize_called"`
			DestroyFlag    bool `json:"destroy_flag"`
			AbortFlag      bool `json:"abort_flag"`
		} `json:"status"`
		CollectiveCounts map[string]uint64 `json:"collective_counts"`
	} `json:"ranks"`
	MissingRanks []struct {
		rasJSONProcess
		Status struct {
			Unresponsive   bool `json:"unresponsive"`
			ConsideredDead bool `json:"considered_dead"`
		} `json:"status"`
	} `json:"missing_ranks"`
}

type rasJSONProcess struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"` // "unknown" when RAS does not know the process
	PID     int    `json:"pid"`  // -1 likewise
	CudaDev int    `json:"cuda_dev"`
	NvmlDev int    `json:"nvml_dev"`
}

func (j rasJSONProcess) rank() RASRank {
	rk := RASRank{Rank: j.Rank, GPU: strconv.Itoa(j.CudaDev)}
	if j.CudaDev != j.NvmlDev { // rasGpuToString
		rk.GPU += fmt.Sprintf(" (NVML %d)", j.NvmlDev)
	}
	if j.PID > 0 && j.Host != "unknown" {
		rk.Node, rk.PID = j.Host, j.PID
	}
	return rk
}

// NCCL's ncclResult_t values that are not errors in a rank's state.
const (
	rasNCCLSuccess    = 0
	rasNCCLInProgress = 7
)

// rasStatusRank orders the states as NCCL's statusStr does: a communicator
// shows the highest of its ranks'.
func rasStatusRank(status string) int {
	return slices.Index([]string{"NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"}, status)
}

func parseRASJSON(text string) RASReport {
	r := RASReport{JSON: true}
	// A token walk rather than one Unmarshal, so that a dump cut short
	// still gives the communicators before the cut.
	dec := json.NewDecoder(strings.NewReader(text))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return r
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return r
		}
		switch t {
		case "nccl_version":
			err = dec.Decode(&r.NCCLVersion)
		case "communicators":
			err = decodeRASComms(dec, &r)
		case "ras":
			var ras struct {
				TimeoutsCount int `json:"timeouts_count"`
			}
			err = dec.Decode(&ras)
			r.Timeouts = ras.TimeoutsCount
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return r
		}
	}
	t, err := dec.Token()
	r.Complete = err == nil && t == json.Delim('}')
	return r
}

func decodeRASComms(dec *json.Decoder, r *RASReport) error {
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return fmt.Errorf("communicators: not an array")
	}
	unreachable := make(map[RASProcess]bool)
	for dec.More() {
		var jc rasJSONComm
		if err := dec.Decode(&jc); err != nil {
			return err
		}
		c := jsonRASComm(jc)
		for _, m := range jc.MissingRanks {
			rk := m.rank()
			if m.Status.Unresponsive && rk.PID != 0 {
				unreachable[RASProcess{PID: rk.PID, Node: rk.Node, Dead: m.Status.ConsideredDead}] = true
			}
		}
		r.Comms = append(r.Comms, c)
	}
	for p := range unreachable {
		r.Unreachable = append(r.Unreachable, p)
		if p.Dead {
			r.DeadProcesses++
		} else {
			r.MissingProcesses++
		}
	}
	slices.SortFunc(r.Unreachable, func(a, b RASProcess) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.PID, b.PID))
	})
	_, err := dec.Token() // ']'
	return err
}

// jsonRASComm fills in what the text report would say of the communicator:
// its groups of counts and states, and its status and errors as
// rasClientRunComms works them out.
func jsonRASComm(jc rasJSONComm) RASComm {
	c := RASComm{Size: jc.Size}
	if h, err := strconv.ParseUint(strings.TrimPrefix(jc.Hash, "0x"), 16, 64); err == nil {
		c.Hash = fmt.Sprintf("%016x", h)
	}
	const (
		mismatch = 1 << iota
		failed
		incomplete
	)
	errs := 0
	nodes := make(map[string]bool)
	counts := make(map[string]map[uint64][]int)
	statuses := make(map[string][]int)
	for _, jr := range jc.Ranks {
		rk := jr.rank()
		c.Ranks = append(c.Ranks, rk)
		if rk.Node != "" {
			nodes[rk.Node] = true
		}
		st := jr.Status
		switch {
		case st.AbortFlag:
			statuses["ABORT"] = append(statuses["ABORT"], jr.Rank)
		case st.FinalizeCalled || st.DestroyFlag:
			statuses["FINALIZE"] = append(statuses["FINALIZE"], jr.Rank)
		case st.InitState == rasNCCLSuccess:
			statuses["RUNNING"] = append(statuses["RUNNING"], jr.Rank)
		default:
			statuses["INIT"] = append(statuses["INIT"], jr.Rank)
		}
		if (st.InitState != rasNCCLSuccess && st.InitState != rasNCCLInProgress) ||
			(st.AsyncError != rasNCCLSuccess && st.AsyncError != rasNCCLInProgress) {
			errs |= failed
			c.Failed = append(c.Failed, jr.Rank)
		}
		for op, n := range jr.CollectiveCounts {
			if counts[op] == nil {
				counts[op] = make(map[uint64][]int)
			}
			counts[op][n] = append(counts[op][n], jr.Rank)
		}
	}
	for _, m := range jc.MissingRanks {
		c.Ranks = append(c.Ranks, m.rank())
		if m.Status.Unresponsive {
			errs |= incomplete
			c.Missing = append(c.Missing, m.Rank)
		} else {
			// It answered, but not as a member of this communicator.
			statuses["NOCOMM"] = append(statuses["NOCOMM"], m.Rank)
		}
	}
	c.Nodes = len(nodes)

	for op, byCount := range counts {
		if len(byCount) > 1 {
			errs |= mismatch
		}
		for n, ranks := range byCount {
			c.Counts = append(c.Counts, RASCount{Op: op, Count: n, NRanks: len(ranks), Ranks: sortedUnique(ranks)})
		}
	}
	// As the text report lists them: by type, then most common first.
	slices.SortFunc(c.Counts, func(a, b RASCount) int {
		return cmp.Or(cmp.Compare(a.Op, b.Op), cmp.Compare(b.NRanks, a.NRanks), cmp.Compare(b.Count, a.Count))
	})
	if len(statuses) > 1 {
		errs |= mismatch
	}
	for s, ranks := range statuses {
		c.Statuses = append(c.Statuses, RASStatus{Status: s, NRanks: len(ranks), Ranks: sortedUnique(ranks)})
		if c.Status == "" || rasStatusRank(s) > rasStatusRank(c.Status) {
			c.Status = s
		}
	}
	slices.SortFunc(c.Statuses, func(a, b RASStatus) int {
		return cmp.Or(cmp.Compare(b.NRanks, a.NRanks), cmp.Compare(rasStatusRank(b.Status), rasStatusRank(a.Status)))
	})
	// NCCL's errorStr: "INCOMPLETE,ERROR,MISMATCH" and its subsets.
	var names []string
	for _, e := range []struct {
		bit  int
		name string
	}{{incomplete, "INCOMPLETE"}, {failed, "ERROR"}, {mismatch, "MISMATCH"}} {
		if errs&e.bit != 0 {
			names = append(names, e.name)
		}
	}
	c.Errors = "OK"
	if len(names) > 0 {
		c.Errors = strings.Join(names, ",")
	}
	return c
}
