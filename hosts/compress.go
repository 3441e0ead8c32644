package hosts

import (
	"strconv"
	"strings"
)

// Compress writes host names as a Slurm hostlist expression, the inverse of
// ExpandSlurmHostlist, in the form `scontrol show hostlist` prints:
//
//	node1 node2 node3 node7   node[1-3,7]
//	node01 node02             node[01-02] (zero padding kept)
//	gpu-a gpu-b               gpu-a,gpu-b (no numeric suffix: as they are)
//	b1 a1 b2                  b1,a1,b2    (order of appearance kept)
//
// Only adjacent names that share everything but a numeric suffix share a
// bracket group, and a range holds only numbers that follow one another
// with the same zero padding, so nothing is reordered: for every list of
// names ExpandSlurmHostlist accepts (letters, digits, '-', '.' and '_', no
// leading '-', at most 1024 bytes each, 65536 names in all),
// ExpandSlurmHostlist(Compress(names)) returns names, duplicates and order
// included. A name made of digits alone is written as it is; an item that
// would pass Slurm's 1024-byte limit is split into several with the same
// prefix.
func Compress(names []string) string {
	var items []string
	for i := 0; i < len(names); {
		prefix, _, ok := numericSuffix(names[i])
		if !ok {
			items = append(items, names[i])
			i++
			continue
		}
		var nums []suffix
		j := i
		for ; j < len(names); j++ {
			p, s, ok := numericSuffix(names[j])
			if !ok || p != prefix {
				break
			}
			nums = append(nums, s)
		}
		items = appendGroup(items, prefix, nums)
		i = j
	}
	return strings.Join(items, ",")
}

// suffix is the numeric end of a host name: its value and its digits as
// written.
type suffix struct {
	value  uint64
	digits string
}

// numericSuffix splits name into a non-empty prefix and the digits it ends
// with. ok is false when name does not end with a digit, is all digits, or
// ends with a number Slurm's range bounds cannot hold.
func numericSuffix(name string) (prefix string, s suffix, ok bool) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) || i == 0 {
		return "", suffix{}, false
	}
	v, err := strconv.ParseUint(name[i:], 10, 64)
	if err != nil || v == ^uint64(0) { // parseRangeBound refuses both
		return "", suffix{}, false
	}
	return name[:i], suffix{value: v, digits: name[i:]}, true
}

// appendGroup appends the items that write prefix+n for every n of nums, in
// order: one bracket group, or several when one would be too long for
// Slurm, or the name alone when the group holds one.
func appendGroup(items []string, prefix string, nums []suffix) []string {
	ranges := suffixRanges(nums)
	var body []string // the ranges of the item being built
	size := len(prefix) + 2
	flush := func() {
		switch {
		case len(body) == 0:
		case len(body) == 1 && !strings.Contains(body[0], "-"):
			items = append(items, prefix+body[0])
		default:
			items = append(items, prefix+"["+strings.Join(body, ",")+"]")
		}
		body, size = nil, len(prefix)+2
	}
	for _, r := range ranges {
		text := r.String()
		if len(body) > 0 && size+1+len(text) > maxHostlistItem {
			flush()
		}
		if size+len(text) > maxHostlistItem {
			// Even alone in brackets it is too long: name each host.
			flush()
			for v := r.lo; ; v++ {
				items = append(items, prefix+padded(v, r.width))
				if v == r.hi {
					break
				}
			}
			continue
		}
		if len(body) > 0 {
			size++ // the comma
		}
		body = append(body, text)
		size += len(text)
	}
	flush()
	return items
}

// suffixRanges merges runs of consecutive numbers that print with the same
// padding into ranges, keeping their order. A range never spans more hosts
// than parseGroup accepts in one.
func suffixRanges(nums []suffix) []hostRange {
	var out []hostRange
	for _, s := range nums {
		if n := len(out); n > 0 {
			r := &out[n-1]
			if s.value == r.hi+1 && s.value-r.lo < maxHostlist && padded(s.value, r.width) == s.digits {
				r.hi = s.value
				continue
			}
		}
		out = append(out, hostRange{lo: s.value, hi: s.value, width: len(s.digits)})
	}
	return out
}

// String writes r as it appears inside brackets: "7", "01-03".
func (r hostRange) String() string {
	if r.lo == r.hi {
		return padded(r.lo, r.width)
	}
	return padded(r.lo, r.width) + "-" + padded(r.hi, r.width)
}
