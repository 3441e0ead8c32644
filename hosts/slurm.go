package hosts

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gorun/gorun/internal/userr"
)

// maxHostlist bounds how many names one Slurm hostlist may expand to. Slurm
// caps a single range at 64K hosts for the same reason: "a[0-999999999]" in
// a typo must not eat the head's memory.
const maxHostlist = 64 * 1024

// maxHostlistItem is the longest item Slurm itself parses (its token
// buffer is 1024 bytes); it also bounds the length of every expanded name.
const maxHostlistItem = 1024

// ExpandSlurmHostlist expands a Slurm hostlist expression into host names,
// exactly as `scontrol show hostnames` prints them:
//
//	node[1-3,5]          node1 node2 node3 node5
//	n[001-003]           n001 n002 n003 (the low bound's width is kept)
//	rack[1-2]-n[01-02]   rack1-n01 rack1-n02 rack2-n01 rack2-n02
//	a1,b[2-3]            a1 b2 b3
//
// Items are separated by commas (or spaces) outside brackets; consecutive
// separators are skipped and duplicates are kept in order, as Slurm does.
// Several bracket groups give their cartesian product, the first group
// outermost; a bracket group must end its item. Unbalanced or nested
// brackets, empty or descending ranges, characters outside [A-Za-z0-9._-],
// and more than 65536 names are InputErrors whose Where is
// "SLURM_JOB_NODELIST (col N)". Names are not checked further, as Slurm
// does not check them; FromSlurm does.
func ExpandSlurmHostlist(expr string) ([]string, error) {
	names, _, err := expandHostlist("SLURM_JOB_NODELIST", expr)
	return names, err
}

// expandHostlist is ExpandSlurmHostlist with the source named in errors. It
// also returns, for each name, the column of the item it came from.
func expandHostlist(source, expr string) (names []string, cols []int, err error) {
	total := 0
	depth, start := 0, -1
	for i := 0; i <= len(expr); i++ {
		c := byte(',')
		if i < len(expr) {
			c = expr[i]
		}
		switch {
		case c == '[':
			if depth > 0 {
				return nil, nil, &userr.InputError{Where: at(source, i+1), Problem: "nested '[' in hostlist", Fix: "close each bracket group before opening another"}
			}
			depth++
		case c == ']':
			if depth == 0 {
				return nil, nil, &userr.InputError{Where: at(source, i+1), Problem: "']' without '[' in hostlist", Fix: "balance the brackets"}
			}
			depth--
		case depth == 0 && (c == ',' || c == ' ' || c == '\t'):
			if start >= 0 {
				expanded, err := expandItem(source, expr[start:i], start, maxHostlist-total)
				if err != nil {
					return nil, nil, err
				}
				total += len(expanded)
				names = append(names, expanded...)
				for range expanded {
					cols = append(cols, start+1)
				}
				start = -1
			}
			continue
		}
		if i == len(expr) {
			break
		}
		if start < 0 {
			start = i
		}
	}
	if depth > 0 {
		open := strings.LastIndexByte(expr, '[')
		return nil, nil, &userr.InputError{Where: at(source, open+1), Problem: "unclosed '[' in hostlist", Fix: "add the closing ']'"}
	}
	return names, cols, nil
}

// hostGroup is one bracket group of an item: its ranges in order.
type hostGroup []hostRange

// hostRange is lo..hi printed with at least width digits.
type hostRange struct {
	lo, hi uint64
	width  int
}

func (g hostGroup) count() uint64 {
	var n uint64
	for _, r := range g {
		n += r.hi - r.lo + 1
	}
	return n
}

// expandItem expands one top-level item starting at offset off, refusing to
// produce more than budget names.
func expandItem(source, item string, off, budget int) ([]string, error) {
	if len(item) > maxHostlistItem {
		return nil, &userr.InputError{Where: at(source, off+1), Problem: fmt.Sprintf("hostlist item is longer than %d characters", maxHostlistItem), Fix: "split it into several items"}
	}
	if item[0] == '-' {
		return nil, &userr.InputError{Where: at(source, off+1), Problem: fmt.Sprintf("host name %s starts with '-'", userr.Quote(item)), Fix: "fix the hostlist"}
	}
	var (
		literals []string // literals[k] precedes groups[k]; one more literal than groups
		groups   []hostGroup
		lit      strings.Builder
	)
	for i := 0; i < len(item); i++ {
		c := item[i]
		if c != '[' {
			if !labelByte(c) && c != '.' {
				r, _ := utf8.DecodeRuneInString(item[i:])
				what := "invalid character " + quoteRune(r)
				if r == utf8.RuneError {
					what = fmt.Sprintf("byte 0x%02x, which is not UTF-8,", c)
				}
				return nil, &userr.InputError{Where: at(source, off+i+1), Problem: fmt.Sprintf("%s in hostlist", what), Fix: "host names use letters, digits, '-', '.' and '_'"}
			}
			lit.WriteByte(c)
			continue
		}
		end := i + strings.IndexByte(item[i:], ']') // balanced: checked by the caller
		if end != len(item)-1 && !strings.Contains(item[end+1:], "[") {
			return nil, &userr.InputError{Where: at(source, off+end+2), Problem: fmt.Sprintf("%s follows the last bracket group", userr.Quote(item[end+1:])), Fix: "Slurm requires a hostlist item to end with its last ']'"}
		}
		g, err := parseGroup(source, item[i+1:end], off+i+1)
		if err != nil {
			return nil, err
		}
		literals = append(literals, lit.String())
		lit.Reset()
		groups = append(groups, g)
		i = end
	}
	literals = append(literals, lit.String())

	n := uint64(1)
	for _, g := range groups {
		n *= g.count()
		if n > uint64(budget) {
			return nil, &userr.InputError{Where: at(source, off+1), Problem: fmt.Sprintf("hostlist expands to more than %d hosts", maxHostlist), Fix: "check the ranges for a typo"}
		}
	}
	out := make([]string, 0, n)
	var walk func(k int, prefix string)
	walk = func(k int, prefix string) {
		prefix += literals[k]
		if k == len(groups) {
			out = append(out, prefix)
			return
		}
		for _, r := range groups[k] {
			for v := r.lo; ; v++ {
				walk(k+1, prefix+padded(v, r.width))
				if v == r.hi {
					break
				}
			}
		}
	}
	walk(0, "")
	return out, nil
}

// parseGroup parses the inside of a bracket group, "1-3,5", found at offset
// off (the column of its first character is off+1).
func parseGroup(source, body string, off int) (hostGroup, error) {
	var g hostGroup
	pos := 0
	for _, part := range strings.Split(body, ",") {
		where := at(source, off+pos+1)
		pos += len(part) + 1
		loText, hiText, isRange := strings.Cut(part, "-")
		if loText == "" || isRange && hiText == "" {
			return nil, &userr.InputError{Where: where, Problem: fmt.Sprintf("empty range %s in hostlist", userr.Quote(part)), Fix: "write N or N-M inside brackets"}
		}
		lo, err := parseRangeBound(loText)
		if err != nil {
			return nil, &userr.InputError{Where: where, Problem: fmt.Sprintf("range %s: %v", userr.Quote(part), err), Fix: "write N or N-M inside brackets"}
		}
		hi := lo
		if isRange {
			if hi, err = parseRangeBound(hiText); err != nil {
				return nil, &userr.InputError{Where: where, Problem: fmt.Sprintf("range %s: %v", userr.Quote(part), err), Fix: "write N or N-M inside brackets"}
			}
		}
		if lo > hi {
			return nil, &userr.InputError{Where: where, Problem: fmt.Sprintf("descending range %s in hostlist", userr.Quote(part)), Fix: "write the low bound first"}
		}
		if hi-lo >= maxHostlist {
			return nil, &userr.InputError{Where: where, Problem: fmt.Sprintf("range %s has more than %d hosts", userr.Quote(part), maxHostlist), Fix: "check the range for a typo"}
		}
		g = append(g, hostRange{lo: lo, hi: hi, width: len(loText)})
	}
	return g, nil
}

// padded prints v in decimal with at least width digits, as "%0*lu" does.
func padded(v uint64, width int) string {
	s := strconv.FormatUint(v, 10)
	if len(s) >= width {
		return s
	}
	return strings.Repeat("0", width-len(s)) + s
}

func parseRangeBound(s string) (uint64, error) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%s is not a number", userr.Quote(s))
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == ^uint64(0) {
		return 0, fmt.Errorf("%s is too large", userr.Quote(s))
	}
	return n, nil
}

// FromSlurm returns the hosts of the Slurm allocation gorun runs in, or
// nil, nil outside one. Nodes come from SLURM_JOB_NODELIST (or the older
// SLURM_NODELIST), in Slurm's order; each must be a valid host name (see
// hostNameProblem) and listed once. Slots come from the first of:
//
//   - SLURM_GPUS_ON_NODE ("8"): the same count on every node;
//   - SLURM_GPUS_PER_NODE ("4", "h100:4"; a list "a100:2,h100:4" is summed);
//   - SLURM_NTASKS_PER_NODE ("8"): the same count on every node;
//   - SLURM_TASKS_PER_NODE ("2(x3),1"): per node, in order.
//
// When none is set, Slots is 0 (not stated). A malformed value is an
// userr.InputError naming the variable.
func FromSlurm(getenv func(string) string) ([]Host, error) {
	source, list := "SLURM_JOB_NODELIST", getenv("SLURM_JOB_NODELIST")
	if list == "" {
		source, list = "SLURM_NODELIST", getenv("SLURM_NODELIST")
	}
	if list == "" {
		return nil, nil
	}
	names, cols, err := expandHostlist(source, list)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, &userr.InputError{Where: source, Problem: fmt.Sprintf("%s=%s names no host", source, userr.Quote(list)), Fix: "run inside the allocation the variables came from"}
	}
	hosts := make([]Host, len(names))
	seen := make(map[string]firstSeen, len(names))
	for i, name := range names {
		if problem, fix := hostNameProblem(name); problem != "" {
			return nil, &userr.InputError{Where: at(source, cols[i]), Problem: problem, Fix: fix}
		}
		key := hostKey(name)
		if first, dup := seen[key]; dup {
			return nil, &userr.InputError{
				Where:   at(source, cols[i]),
				Problem: duplicateProblem(name, first.name, first.at) + " in " + source,
				Fix:     "give each node once (--hosts or --hostfile override the allocation)",
			}
		}
		seen[key] = firstSeen{name: name, at: fmt.Sprintf("from the item at col %d", cols[i])}
		hosts[i].Name = name
	}
	slots, err := slurmSlots(getenv, len(names))
	if err != nil {
		return nil, err
	}
	for i := range hosts {
		if slots != nil {
			hosts[i].Slots, hosts[i].Implied = slots[i], true
		}
	}
	return hosts, nil
}

// slurmSlots returns the slot count of each of n nodes, or nil when Slurm
// does not say.
func slurmSlots(getenv func(string) string, n int) ([]int, error) {
	same := func(v int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = v
		}
		return s
	}
	if v := getenv("SLURM_GPUS_ON_NODE"); v != "" {
		c, err := slurmCount("SLURM_GPUS_ON_NODE", v, true)
		if err != nil {
			return nil, err
		}
		if c > 0 {
			return same(c), nil
		}
	}
	if v := getenv("SLURM_GPUS_PER_NODE"); v != "" {
		c, err := gpusPerNode(v)
		if err != nil {
			return nil, err
		}
		if c > 0 {
			return same(c), nil
		}
	}
	if v := getenv("SLURM_NTASKS_PER_NODE"); v != "" {
		c, err := slurmCount("SLURM_NTASKS_PER_NODE", v, false)
		if err != nil {
			return nil, err
		}
		return same(c), nil
	}
	if v := getenv("SLURM_TASKS_PER_NODE"); v != "" {
		counts, err := expandTasksPerNode(v)
		if err != nil {
			return nil, err
		}
		if len(counts) != n {
			return nil, &userr.InputError{
				Where:   "SLURM_TASKS_PER_NODE",
				Problem: fmt.Sprintf("SLURM_TASKS_PER_NODE=%s gives %d counts for %d nodes", userr.Quote(v), len(counts), n),
				Fix:     "run inside the allocation the variables came from",
			}
		}
		return counts, nil
	}
	return nil, nil
}

// slurmCount parses a plain count from a Slurm variable.
func slurmCount(name, v string, zeroOK bool) (int, error) {
	if zeroOK && v != "" && strings.Trim(v, "0") == "" {
		return 0, nil
	}
	c, err := parseSlots(v)
	if err != nil {
		return 0, &userr.InputError{Where: name, Problem: fmt.Sprintf("%s=%s: %v", name, userr.Quote(v), err), Fix: "run inside the allocation the variables came from"}
	}
	return c, nil
}

// gpusPerNode parses SLURM_GPUS_PER_NODE, "[type:]count[,...]"; the counts
// of several types add up.
func gpusPerNode(v string) (int, error) {
	const name = "SLURM_GPUS_PER_NODE"
	total := 0
	for _, part := range strings.Split(v, ",") {
		count := part
		if i := strings.LastIndexByte(part, ':'); i >= 0 {
			count = part[i+1:]
		}
		c, err := slurmCount(name, count, true)
		if err != nil {
			return 0, &userr.InputError{Where: name, Problem: fmt.Sprintf("%s=%s: item %s is not [type:]count", name, userr.Quote(v), userr.Quote(part)), Fix: `expected counts like "4" or "h100:4"`}
		}
		total += c
		if total > maxSlots {
			return 0, &userr.InputError{Where: name, Problem: fmt.Sprintf("%s=%s: too many GPUs", name, userr.Quote(v)), Fix: fmt.Sprintf("at most %d per node", maxSlots)}
		}
	}
	return total, nil
}

// expandTasksPerNode expands Slurm's compressed per-node counts, as in
// SLURM_TASKS_PER_NODE: "2(x3),1" is 2,2,2,1.
func expandTasksPerNode(v string) ([]int, error) {
	const name = "SLURM_TASKS_PER_NODE"
	bad := func(part, why string) error {
		return &userr.InputError{Where: name, Problem: fmt.Sprintf("%s=%s: item %s %s", name, userr.Quote(v), userr.Quote(part), why), Fix: `expected counts like "2(x3),1"`}
	}
	var out []int
	for _, part := range strings.Split(v, ",") {
		count, reps := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasPrefix(part[i:], "(x") || !strings.HasSuffix(part, ")") {
				return nil, bad(part, "is not N or N(xR)")
			}
			count, reps = part[:i], part[i+2:len(part)-1]
		}
		c, err := parseSlots(count)
		if err != nil {
			return nil, bad(part, err.Error())
		}
		r, err := parseSlots(reps)
		if err != nil {
			return nil, bad(part, "repeat: "+err.Error())
		}
		if len(out)+r > maxHostlist {
			return nil, bad(part, fmt.Sprintf("makes more than %d nodes", maxHostlist))
		}
		for range r {
			out = append(out, c)
		}
	}
	return out, nil
}

// Slurm's step ids above this one are not steps of tasks: the batch
// script's, the extern step's, the interactive step's (0xfffffff0 and up).
const slurmLastTaskStep = 0xffffffef

// SlurmStep reports whether this process is one task of a Slurm job step,
// started by srun: SLURM_STEP_ID names a step of tasks, not the batch
// script, the extern or the interactive step. Such a gorun is that node's
// torchrun (`srun gorun ...` in a job script) and must not launch the
// whole allocation itself.
func SlurmStep(getenv func(string) string) bool {
	id, err := strconv.ParseUint(getenv("SLURM_STEP_ID"), 10, 32)
	return err == nil && id <= slurmLastTaskStep && getenv("SLURM_JOB_ID") != ""
}
