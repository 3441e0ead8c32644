package launch

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/pystack"
	"github.com/gorun/gorun/internal/userr"
)

// RankStacks is one rank's stacks, as a hang diagnosis gathered them.
type RankStacks struct {
	Node      string
	NodeIndex int // the node's place in the attempt
	Rank      int // -1 when unknown
	LocalRank int
	// Dump is what the rank's supervisor sent, with source lines read on
	// the node; nil when it sent none in time.
	Dump *pystack.Dump
	// Place is where the dump says the rank is (pystack.Locate).
	Place pystack.Place
}

// hangGroup is the ranks of a hang found at one place: the same kind,
// collective and line of code.
type hangGroup struct {
	place pystack.Place
	none  string // why there is no place: no dump, or a dump with no frame
	ranks []RankStacks
}

// stuck reports whether the group's ranks are not waiting for their peers.
func (g hangGroup) stuck() bool { return g.none == "" && !g.place.Kind.Waiting() }

// groupHang places every rank and groups them by place: smallest group
// first (the odd ones out are the likely culprits), a stuck group before a
// waiting one of the same size, then by lowest rank. Within a group the
// ranks keep their order: by node, then local rank.
func groupHang(ranks []RankStacks) []hangGroup {
	type key struct {
		kind     pystack.Kind
		op, file string
		line     int
		none     string
	}
	var groups []hangGroup
	index := map[key]int{}
	for _, r := range ranks {
		var k key
		switch {
		case r.Dump == nil:
			k.none = "sent no stacks in time"
		case len(r.Dump.Threads) == 0 && r.Dump.Tool == pystack.ToolFaulthandler:
			k.none = "faulthandler printed no stacks (PYTHONFAULTHANDLER off, or a handler of its own?)"
		default:
			r.Place = pystack.Locate(*r.Dump)
			if r.Place.Kind == pystack.NoFrames {
				k.none = "its dump holds no Python frame"
			} else {
				k = key{kind: r.Place.Kind, op: r.Place.Op, file: r.Place.At.File, line: r.Place.At.Line}
			}
		}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, hangGroup{place: r.Place, none: k.none})
		}
		groups[i].ranks = append(groups[i].ranks, r)
	}
	slices.SortStableFunc(groups, func(a, b hangGroup) int {
		if c := cmp.Compare(len(a.ranks), len(b.ranks)); c != 0 {
			return c
		}
		if a.stuck() != b.stuck() {
			if a.stuck() {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ranks[0].Rank, b.ranks[0].Rank)
	})
	return groups
}

// maxHangLines bounds the group lines on the console; the summary file
// has them all.
const maxHangLines = 10

// maxConsoleFrames bounds the frames of the culprit's stack on the console.
const maxConsoleFrames = 30

// renderHang writes a hang's diagnosis: one "gorun: hang:" line per group
// (at most maxHangLines on the console; lines holds them all), the ranks
// NCCL's RAS found lagging (lagging, global ranks), a word on what the
// groups together say, and the stack of the likely culprit, its speaking
// thread only: the first rank of the first group, or where no group is
// plainly stuck, the first lagging rank.
func renderHang(groups []hangGroup, world int, lagging []int) (console string, lines []string) {
	for _, g := range groups {
		lines = append(lines, "gorun: hang: "+g.line(world)+"\n")
	}
	var b strings.Builder
	for i, l := range lines {
		if i == maxHangLines {
			n := 0
			for _, g := range groups[i:] {
				n += len(g.ranks)
			}
			fmt.Fprintf(&b, "gorun: hang: and %d more places of %d ranks (in the summary file below)\n", len(groups)-i, n)
			break
		}
		b.WriteString(l)
	}
	var more []string
	lagLine, lagRank := lagWords(groups, lagging)
	if lagLine != "" {
		more = append(more, lagLine)
	}
	if w := verdict(groups); w != "" {
		more = append(append(more, w), oddThreads(groups, world)...)
	}
	for _, l := range more {
		b.WriteString("gorun: hang: " + l + "\n")
		lines = append(lines, "gorun: hang: "+l+"\n")
	}
	switch {
	case lagRank != nil && !groups[0].stuck():
		writeStack(&b, *lagRank)
	case len(groups) > 0 && groups[0].none == "":
		writeStack(&b, groups[0].ranks[0])
	}
	return b.String(), lines
}

// lagWords says which ranks NCCL's RAS found lagging, each with where its
// stacks say it is (up to maxOddThreads of them), and returns the first
// that sent stacks.
func lagWords(groups []hangGroup, lagging []int) (string, *RankStacks) {
	if len(lagging) == 0 {
		return "", nil
	}
	lag := slices.Compact(slices.Sorted(slices.Values(lagging)))
	var first *RankStacks
	var places []string
	for _, g := range groups {
		for i, r := range g.ranks {
			if !slices.Contains(lag, r.Rank) {
				continue
			}
			if first == nil && g.none == "" {
				first = &g.ranks[i]
			}
			if len(places) < maxOddThreads {
				places = append(places, r.Node+rankWordsShort(r)+" "+g.placeShort())
			}
		}
	}
	what := "rank " + compressRanks(lag) + " is"
	if len(lag) > 1 {
		what = "ranks " + compressRanks(lag) + " are"
	}
	s := fmt.Sprintf("NCCL's RAS: %s behind the others in their collective count (did not join a collective, or did not answer)", what)
	if len(places) > 0 {
		s += ": " + strings.Join(places, "; ")
	}
	return s, first
}

// placeShort is where the group is, in a few words.
func (g hangGroup) placeShort() string {
	if g.none != "" {
		return "(no stacks)"
	}
	at := path.Base(g.place.At.File)
	if g.place.At.Line > 0 {
		at += ":" + strconv.Itoa(g.place.At.Line)
	}
	switch g.place.Kind {
	case pystack.Collective:
		return "in " + g.place.Op + " at " + at
	case pystack.Backward:
		return "in backward at " + at
	}
	return "at " + at + ", not in a collective"
}

// verdict says what the groups together show, where no group is plainly
// stuck: everyone waits in one place, or in different collectives.
func verdict(groups []hangGroup) string {
	waiting := 0
	for _, g := range groups {
		if g.stuck() {
			return ""
		}
		if g.none == "" {
			waiting++
		}
	}
	switch {
	case waiting == 1 && len(groups) == 1:
		return "no rank is stuck in Python: every rank waits in the same collective, so the cause is below it " +
			"(the network, a GPU, a rank stuck in native code); NCCL's RAS report (NCCL >= 2.24, printed above when there is one) " +
			"names ranks that lag, and --flight-recorder DIR keeps every rank's last collectives"
	case waiting > 1:
		return "no rank is stuck in Python, but the ranks wait in different places: collectives called in a different order " +
			"on some ranks, or one that some ranks skipped"
	}
	return ""
}

// maxOddThreads bounds oddThreads' lines.
const maxOddThreads = 4

// oddThreads finds, where no rank is plainly stuck, the threads that
// speak for no rank and stand out: in the script's code, outside any
// collective, at a place where fewer than half the ranks have a thread.
// Such a thread, in a C call that holds the GIL (ctypes, an extension
// that does not release it), keeps its rank from leaving a collective
// while the rank's own stack shows nothing wrong. A thread every rank
// has (a data loader's, a logger's) is not named.
func oddThreads(groups []hangGroup, world int) []string {
	type at struct {
		file string
		line int
	}
	var order []at
	where := map[at]pystack.Place{}
	ranks := map[at][]RankStacks{}
	for _, g := range groups {
		for _, r := range g.ranks {
			if r.Dump == nil {
				continue
			}
			seen := map[at]bool{}
			for i, t := range r.Dump.Threads {
				p := pystack.ThreadPlace(t)
				k := at{p.At.File, p.At.Line}
				if i == r.Place.Thread || !p.User || p.Kind.Waiting() || seen[k] {
					continue
				}
				seen[k] = true
				if _, ok := where[k]; !ok {
					order = append(order, k)
					where[k] = p
				}
				ranks[k] = append(ranks[k], r)
			}
		}
	}
	var lines []string
	for _, k := range order {
		if rs := ranks[k]; 2*len(rs) < world && len(lines) < maxOddThreads {
			lines = append(lines, fmt.Sprintf("%s also %s a thread the other ranks lack, at %s, outside any collective: "+
				"a C call there that holds the GIL (ctypes, an extension that does not release it) keeps its rank from leaving its collective",
				rankGroupWords(rs, world), map[bool]string{true: "has", false: "have"}[len(rs) == 1], placeWords(where[k])))
		}
	}
	return lines
}

// line is the group's line, without "gorun: hang: ".
func (g hangGroup) line(world int) string {
	who := rankGroupWords(g.ranks, world)
	if g.none != "" {
		return fmt.Sprintf("no stacks: %s (%s)", who, g.none)
	}
	at := placeWords(g.place)
	switch g.place.Kind {
	case pystack.Collective:
		return fmt.Sprintf("waiting: %s in %s at %s", who, g.place.Op, at)
	case pystack.Backward:
		return fmt.Sprintf("waiting: %s in backward at %s (DDP and FSDP reduce gradients there)", who, at)
	}
	return fmt.Sprintf("stuck: %s at %s — not in a collective", who, at)
}

// placeWords is "hang.py:5 time.sleep(3600)": the file's base name, the
// line and its source; outside user code, the function too.
func placeWords(p pystack.Place) string {
	s := path.Base(p.At.File)
	if p.At.Line > 0 {
		s += ":" + strconv.Itoa(p.At.Line)
	}
	if !p.User {
		s += " in " + p.At.Func + " (no frame of the script's own code)"
	}
	if p.At.Source != "" {
		s += " " + p.At.Source
	}
	return s
}

// rankGroupWords names a group's ranks: each with its node when there are
// a few ("node2 rank 4, node0 rank 1"), else a count, the ranks as ranges
// and the nodes as a host list ("5 ranks (0-3,5 on node[0-2])"), or "all
// N ranks".
func rankGroupWords(rs []RankStacks, world int) string {
	if len(rs) <= 4 && (len(rs) < world || world == 1) {
		var parts []string
		for _, r := range rs {
			parts = append(parts, r.Node+rankWordsShort(r))
		}
		return strings.Join(parts, ", ")
	}
	var ranks []int
	var nodes []string
	for _, r := range rs {
		ranks = append(ranks, r.Rank)
		if len(nodes) == 0 || nodes[len(nodes)-1] != r.Node {
			nodes = append(nodes, r.Node)
		}
	}
	where := hosts.Compress(slices.Compact(nodes))
	if len(where) > 60 {
		where = strconv.Itoa(len(slices.Compact(nodes))) + " nodes"
	}
	count := fmt.Sprintf("%d ranks", len(rs))
	if len(rs) == world {
		count = "all " + count
	}
	return fmt.Sprintf("%s (%s on %s)", count, compressRanks(ranks), where)
}

func rankWordsShort(r RankStacks) string {
	if r.Rank >= 0 {
		return fmt.Sprintf(" rank %d", r.Rank)
	}
	return fmt.Sprintf(" local rank %d", r.LocalRank)
}

// maxRankRanges bounds compressRanks.
const maxRankRanges = 8

// compressRanks writes ranks, sorted, as ranges: "0-3,5,7-9"; past
// maxRankRanges ranges the rest is counted, "0,2,4,…(+95)". Unknown
// ranks (-1) are counted as such.
func compressRanks(ranks []int) string {
	s := slices.Clone(ranks)
	slices.Sort(s)
	unknown := 0
	for len(s) > 0 && s[0] < 0 {
		s, unknown = s[1:], unknown+1
	}
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if len(parts) == maxRankRanges {
			parts = append(parts, fmt.Sprintf("…(+%d)", len(s)-i))
			break
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		} else {
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	if unknown > 0 {
		parts = append(parts, fmt.Sprintf("%d of unknown rank", unknown))
	}
	return strings.Join(parts, ",")
}

// writeStack writes the speaking thread of one rank's dump, as Python's
// tracebacks do, most recent call first, each frame with its source.
func writeStack(b *strings.Builder, r RankStacks) {
	d := r.Dump
	if d == nil || r.Place.Thread < 0 || r.Place.Thread >= len(d.Threads) {
		return
	}
	t := d.Threads[r.Place.Thread]
	thread := "thread " + t.ID
	if t.Name != "" {
		thread += " (" + t.Name + ")"
	}
	fmt.Fprintf(b, "gorun: hang: %s%s, %s, by %s (most recent call first):\n", r.Node, rankWordsShort(r), thread, d.Tool)
	for i, f := range t.Frames {
		if i == maxConsoleFrames {
			fmt.Fprintf(b, "gorun:     … %d more frames\n", len(t.Frames)-i)
			break
		}
		line := "???"
		if f.Line > 0 {
			line = strconv.Itoa(f.Line)
		}
		// The node's file names and source lines, escaped as every worker text gorun quotes.
		fmt.Fprintf(b, "gorun:     File \"%s\", line %s in %s\n", userr.Printable(f.File), line, userr.Printable(f.Func))
		if f.Source != "" {
			fmt.Fprintf(b, "gorun:       %s\n", userr.Printable(f.Source))
		}
	}
	if t.Truncated {
		b.WriteString("gorun:     … (the dumper stopped here)\n")
	}
}
