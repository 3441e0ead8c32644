package cpuset

import (
	"fmt"
	"strconv"
	"strings"
)

// maxCPU bounds the CPU ids a cpulist may name. Linux's NR_CPUS tops out at
// 8192; the bound keeps a corrupt list ("0-4000000000") from allocating
// gigabytes.
const maxCPU = 1 << 16

// Parse parses the kernel's cpulist form ("0-3,8,10-11", as in
// /sys/devices/system/node/node0/cpulist or a PCI device's local_cpulist)
// into sorted, distinct CPU ids. Surrounding white space and a trailing
// newline are ignored; an empty list yields no CPUs.
func Parse(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus []int
	sorted := true
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, err := parseCPURange(part)
		if err != nil {
			return nil, fmt.Errorf("cpulist %q: %w", s, err)
		}
		if len(cpus) > 0 && lo <= cpus[len(cpus)-1] {
			sorted = false
		}
		for c := lo; c <= hi; c++ {
			cpus = append(cpus, c)
		}
		if len(cpus) > maxCPU {
			return nil, fmt.Errorf("cpulist %q: more than %d CPUs", s, maxCPU)
		}
	}
	if !sorted {
		cpus = sortDistinct(cpus)
	}
	return cpus, nil
}

// parseCPURange parses "N" or "N-M".
func parseCPURange(part string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(part), "-")
	lo, err = parseCPU(a)
	if err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	hi, err = parseCPU(b)
	if err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("range %q runs backwards", part)
	}
	return lo, hi, nil
}

func parseCPU(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n >= maxCPU {
		return 0, fmt.Errorf("CPU %q is out of range (0-%d)", s, maxCPU-1)
	}
	return n, nil
}

// sortDistinct sorts ids in place and drops duplicates. CPU ids are small,
// so a presence table is both simple and linear.
func sortDistinct(ids []int) []int {
	maxID := 0
	for _, c := range ids {
		maxID = max(maxID, c)
	}
	seen := make([]bool, maxID+1)
	for _, c := range ids {
		seen[c] = true
	}
	out := ids[:0]
	for c, ok := range seen {
		if ok {
			out = append(out, c)
		}
	}
	return out
}

// Format writes CPU ids in the kernel's cpulist form, merging runs
// into ranges: [0 1 2 3 8] → "0-3,8". The ids need not be sorted.
func Format(cpus []int) string {
	if len(cpus) == 0 {
		return ""
	}
	sorted := true
	for i := 1; i < len(cpus); i++ {
		if cpus[i] <= cpus[i-1] {
			sorted = false
			break
		}
	}
	if !sorted {
		cpus = sortDistinct(append([]int(nil), cpus...))
	}
	var b strings.Builder
	for _, r := range cpuRanges(cpus) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r[0]))
		if r[1] > r[0] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(r[1]))
		}
	}
	return b.String()
}

// cpuRanges splits sorted distinct ids into maximal runs [first, last].
func cpuRanges(cpus []int) [][2]int {
	var runs [][2]int
	for i, c := range cpus {
		if i > 0 && c == cpus[i-1]+1 {
			runs[len(runs)-1][1] = c
			continue
		}
		runs = append(runs, [2]int{c, c})
	}
	return runs
}

// Intersect returns the ids present in both sorted distinct lists.
func Intersect(a, b []int) []int {
	out := make([]int, 0, min(len(a), len(b)))
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// Subtract returns the ids of sorted distinct a that are not in b.
func Subtract(a, b []int) []int {
	out := make([]int, 0, len(a))
	j := 0
	for _, c := range a {
		for j < len(b) && b[j] < c {
			j++
		}
		if j < len(b) && b[j] == c {
			continue
		}
		out = append(out, c)
	}
	return out
}

// Union merges two sorted distinct lists into one. It may return a or b
// itself when the other is empty.
func Union(a, b []int) []int {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]int, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// Split divides sorted distinct CPUs into n disjoint sets, the way
// torch's "exclusive" NUMA binding divides a node's cores: contiguous
// chunks, lower indices getting one more when the count does not divide.
//
// Facts carry no thread-sibling map, so one pattern is recognised by shape:
// a list of equal runs ("0-47,96-143" is cores 0-47 and their hyperthread
// siblings on most x86 servers) is split run by run, and part i takes chunk
// i of every run ("0-11,96-107"), keeping each core with its sibling.
// Any other list is split as one sequence. It returns nil when some set
// would be empty.
func Split(cpus []int, n int) [][]int {
	if n <= 0 || len(cpus) < n {
		return nil
	}
	runs := cpuRanges(cpus)
	size := runs[0][1] - runs[0][0] + 1
	equal := len(runs) > 1 && size >= n
	for _, r := range runs[1:] {
		if r[1]-r[0]+1 != size {
			equal = false
			break
		}
	}
	parts := make([][]int, n)
	if equal {
		for at := 0; at < len(cpus); at += size {
			for i, c := range chunk(cpus[at:at+size], n) {
				parts[i] = append(parts[i], c...)
			}
		}
		return parts
	}
	return chunk(cpus, n)
}

// chunk cuts s into n contiguous pieces whose sizes differ by at most one,
// the larger pieces first. len(s) must be at least n.
func chunk(s []int, n int) [][]int {
	parts := make([][]int, n)
	base, extra := len(s)/n, len(s)%n
	at := 0
	for i := range parts {
		k := base
		if i < extra {
			k++
		}
		parts[i] = s[at : at+k : at+k]
		at += k
	}
	return parts
}
