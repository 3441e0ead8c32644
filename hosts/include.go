package hosts

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/userr"
)

// ApplyIncludeExclude filters hosts with DeepSpeed's --include / --exclude
// syntax, NODE_SPEC[@NODE_SPEC...] where NODE_SPEC is NAME[:ID[,ID...]]:
// "worker-0@worker-1:0,2". A host's GPU ids are its GPUs when set, else
// 0..Slots-1 when Slots is known.
//
// include keeps only the named hosts, in their original order: a bare name
// keeps the host as it was (all its slots); NAME:IDS sets GPUs to those ids,
// sorted and deduplicated, and Slots to their count. Naming a host twice
// takes the union of its ids. On a host whose slot count is unknown, ids
// are taken as given.
//
// exclude removes whole hosts (bare name) or GPU ids (NAME:IDS); a host left
// with no GPU is dropped, and a host not named is kept unchanged. Ids cannot
// be excluded from a host whose slot count is unknown.
//
// Giving both, naming an invalid host name (see hostNameProblem) or an
// unknown host, an id the host does not have, or bad syntax is an
// userr.InputError naming the item. Names match as hosts do: case aside, and
// localhost, 127.0.0.1 and ::1 as one. With both empty, hosts are
// returned unchanged.
func ApplyIncludeExclude(hosts []Host, include, exclude string) ([]Host, error) {
	if include != "" && exclude != "" {
		return nil, &userr.InputError{Where: "--include", Problem: "--include and --exclude are mutually exclusive", Fix: "give one of them"}
	}
	if include == "" && exclude == "" {
		return hosts, nil
	}
	flag, expr := "--include", include
	if exclude != "" {
		flag, expr = "--exclude", exclude
	}
	specs, err := parseResourceFilter(flag, expr, hosts)
	if err != nil {
		return nil, err
	}
	if include != "" {
		return applyInclude(hosts, specs), nil
	}
	return applyExclude(flag, hosts, specs)
}

// nodeSpec is one NAME[:IDS] item of a filter, resolved to an index into
// the host list.
type nodeSpec struct {
	host int
	ids  []int // nil for a bare name
	col  int
	text string
}

func parseResourceFilter(flag, expr string, hosts []Host) ([]nodeSpec, error) {
	index := make(map[string]int, len(hosts))
	for i, h := range hosts {
		index[hostKey(h.Name)] = i
	}
	var specs []nodeSpec
	for start := 0; start <= len(expr); {
		end := strings.IndexByte(expr[start:], '@')
		if end < 0 {
			end = len(expr)
		} else {
			end += start
		}
		item, col := expr[start:end], start+1
		where := at(flag, col)
		if item == "" {
			return nil, &userr.InputError{Where: where, Problem: "empty node in " + flag, Fix: "write NAME[:ID,ID]@NAME..."}
		}
		name, idText, hasIDs := splitNodeSpec(item)
		if problem, fix := hostNameProblem(name); problem != "" {
			return nil, &userr.InputError{Where: where, Problem: problem, Fix: fix}
		}
		i, known := index[hostKey(name)]
		if !known {
			return nil, &userr.InputError{Where: where, Problem: fmt.Sprintf("%s names host %s, which is not in the host list", flag, userr.Quote(name)), Fix: "use a host from --hosts, --hostfile or the Slurm allocation"}
		}
		spec := nodeSpec{host: i, col: col, text: item}
		if hasIDs {
			ids, err := parseIDs(idText)
			if err != nil {
				return nil, &userr.InputError{Where: at(flag, col+len(item)-len(idText)), Problem: fmt.Sprintf("%s: %v", userr.Quote(item), err), Fix: "write NAME:0,1,2 with GPU ids"}
			}
			if avail, ok := available(hosts[i]); ok {
				for _, id := range ids {
					if !slices.Contains(avail, id) {
						return nil, &userr.InputError{Where: where, Problem: fmt.Sprintf("%s: host %s has no GPU %d (it has %s)", userr.Quote(item), userr.Quote(hosts[i].Name), id, idList(avail)), Fix: "use ids the host has"}
					}
				}
			}
			spec.ids = ids
		}
		specs = append(specs, spec)
		start = end + 1
	}
	return specs, nil
}

// splitNodeSpec splits "name:ids" (or "[v6]:ids"); hasIDs tells whether a
// ':' introduced an id list.
func splitNodeSpec(item string) (name, ids string, hasIDs bool) {
	if strings.HasPrefix(item, "[") {
		if end := strings.IndexByte(item, ']'); end >= 0 {
			name, rest := item[1:end], item[end+1:]
			if strings.HasPrefix(rest, ":") {
				return name, rest[1:], true
			}
			if rest == "" {
				return name, "", false
			}
		}
		return item, "", false // not a host name: reported as such
	}
	name, ids, hasIDs = strings.Cut(item, ":")
	return name, ids, hasIDs
}

// parseIDs parses "0,2,3" into sorted, deduplicated ids.
func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			return nil, fmt.Errorf("empty GPU id")
		}
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return nil, fmt.Errorf("GPU id %s is not a number", userr.Quote(part))
			}
		}
		n, err := strconv.Atoi(part)
		if err != nil || n >= maxSlots {
			return nil, fmt.Errorf("GPU id %s is too large", userr.Quote(part))
		}
		ids = append(ids, n)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// available is the host's GPU ids; ok is false when they are unknown.
func available(h Host) (ids []int, ok bool) {
	if h.GPUs != nil {
		return h.GPUs, true
	}
	if h.Slots > 0 {
		ids = make([]int, h.Slots)
		for i := range ids {
			ids[i] = i
		}
		return ids, true
	}
	return nil, false
}

func applyInclude(hosts []Host, specs []nodeSpec) []Host {
	whole := make(map[int]bool)
	picked := make(map[int][]int)
	for _, s := range specs {
		if s.ids == nil {
			whole[s.host] = true
		} else {
			picked[s.host] = append(picked[s.host], s.ids...)
		}
	}
	var out []Host
	for i, h := range hosts {
		switch {
		case whole[i]:
			out = append(out, cloneHost(h))
		case picked[i] != nil:
			out = append(out, withGPUs(h, picked[i]))
		}
	}
	return out
}

func applyExclude(flag string, hosts []Host, specs []nodeSpec) ([]Host, error) {
	drop := make(map[int]bool)
	removed := make(map[int][]int)
	for _, s := range specs {
		if s.ids == nil {
			drop[s.host] = true
			continue
		}
		if _, ok := available(hosts[s.host]); !ok {
			return nil, &userr.InputError{
				Where:   at(flag, s.col),
				Problem: fmt.Sprintf("%s: host %s has an unknown slot count, so GPUs cannot be excluded from it", userr.Quote(s.text), userr.Quote(hosts[s.host].Name)),
				Fix:     "state its slots (host:N or slots=N), or use --include with the GPUs to keep",
			}
		}
		removed[s.host] = append(removed[s.host], s.ids...)
	}
	var out []Host
	for i, h := range hosts {
		if drop[i] {
			continue
		}
		gone, touched := removed[i]
		if !touched {
			out = append(out, cloneHost(h))
			continue
		}
		avail, _ := available(h)
		var keep []int
		for _, id := range avail {
			if !slices.Contains(gone, id) {
				keep = append(keep, id)
			}
		}
		if len(keep) == 0 {
			continue
		}
		out = append(out, withGPUs(h, keep))
	}
	return out, nil
}

// withGPUs returns h using exactly ids (sorted, deduplicated).
func withGPUs(h Host, ids []int) Host {
	gpus := slices.Clone(ids)
	slices.Sort(gpus)
	gpus = slices.Compact(gpus)
	return Host{Name: h.Name, Slots: len(gpus), GPUs: gpus}
}

// cloneHost copies h so callers never share GPU slices with the input.
func cloneHost(h Host) Host {
	h.GPUs = slices.Clone(h.GPUs)
	return h
}

func idList(ids []int) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, ",")
}
