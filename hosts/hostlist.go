package hosts

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/userr"
)

// maxSlots bounds the process count of one host. No node runs this many
// workers; the bound keeps arithmetic on slot counts far from overflow.
const maxSlots = 1 << 16

// Resolve turns what the user gave into the job's hosts, in launch
// order. It is the one entry point main uses. Precedence:
//
//  1. --hosts and --hostfile are mutually exclusive; giving both is an
//     userr.InputError. hostfileName non-empty means --hostfile was given, and
//     hostfileData holds its contents.
//  2. Otherwise, inside a Slurm allocation (SLURM_JOB_NODELIST or
//     SLURM_NODELIST set), the allocation's nodes, with slots from the
//     Slurm GPU or task counts (see FromSlurm); but a gorun that is
//     one task of an srun step (SlurmStep) runs on its node alone.
//  3. Otherwise no hosts: Resolve returns nil, nil and gorun runs on
//     this machine alone, as plain torchrun does.
//
// Every source refuses a host name that is not valid (see hostNameProblem)
// and a host listed twice, localhost, 127.0.0.1 and ::1 counting as one, so
// the hosts returned name distinct machines.
//
// --include / --exclude (DeepSpeed syntax) then filter whichever list was
// chosen; they need a list, so giving them in local mode is a userr.InputError.
// getenv is the head's environment lookup (os.Getenv in main).
func Resolve(hostsFlag, hostfileName string, hostfileData []byte, include, exclude string, getenv func(string) string) ([]Host, error) {
	if hostsFlag != "" && hostfileName != "" {
		return nil, &userr.InputError{
			Where:   "--hosts",
			Problem: "--hosts and --hostfile both given",
			Fix:     "give one of them",
		}
	}
	var (
		hosts []Host
		err   error
	)
	switch {
	case hostsFlag != "":
		hosts, err = Parse(hostsFlag)
	case hostfileName != "":
		hosts, err = ParseHostfile(hostfileName, hostfileData)
	case SlurmStep(getenv):
		// One task of `srun gorun ...`: this node alone, as its torchrun.
	default:
		hosts, err = FromSlurm(getenv)
	}
	if err != nil {
		return nil, err
	}
	if hosts == nil {
		if include != "" || exclude != "" {
			flag := "--include"
			if include == "" {
				flag = "--exclude"
			}
			return nil, &userr.InputError{
				Where:   flag,
				Problem: flag + " needs a host list, and none was given",
				Fix:     "add --hosts or --hostfile, or set CUDA_VISIBLE_DEVICES to pick GPUs on this machine",
			}
		}
		return nil, nil
	}
	hosts, err = ApplyIncludeExclude(hosts, include, exclude)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		// nil would mean local mode; a filter that removed every host
		// must not silently turn into a run on the head.
		return nil, &userr.InputError{Where: "--exclude", Problem: "--exclude removed every host", Fix: "keep at least one host"}
	}
	return hosts, nil
}

// Parse parses the --hosts flag: a comma-separated list of hosts, each
// with an optional slot count, "h1:8,h2:8,h3". A host is a name (see
// hostNameProblem), an IPv4 address, or an IPv6 address, in brackets when it
// has a count ("[fe80::1]:8") and bare when it cannot be misread
// ("fe80::1"). A host without a count gets Slots 0 (not stated). Empty
// items, bad names, bad or zero counts and duplicate hosts (localhost,
// 127.0.0.1 and ::1 are one) are InputErrors whose Where gives the 1-based
// column. An item may name several hosts in Slurm's hostlist syntax,
// "gpu[01-04,07]:8" (ExpandSlurmHostlist), each with its count.
func Parse(list string) ([]Host, error) {
	const flag = "--hosts"
	if strings.TrimSpace(list) == "" {
		return nil, &userr.InputError{Where: flag, Problem: "empty host list", Fix: "write --hosts h1:8,h2:8"}
	}
	var hosts []Host
	seen := make(map[string]firstSeen) // host key → first sight
	for start := 0; start <= len(list); {
		end := itemEnd(list, start)
		item := list[start:end]
		col := start + 1 + (len(item) - len(strings.TrimLeft(item, " \t")))
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, &userr.InputError{Where: at(flag, col), Problem: "empty item in host list", Fix: "remove the extra comma"}
		}
		items, err := parseListItem(item, col, func(c int) string { return at(flag, c) })
		if err != nil {
			return nil, err
		}
		for _, h := range items {
			key := hostKey(h.Name)
			if first, dup := seen[key]; dup {
				return nil, &userr.InputError{
					Where:   at(flag, col),
					Problem: duplicateProblem(h.Name, first.name, first.at),
					Fix:     "list each host once with its total slots",
				}
			}
			seen[key] = firstSeen{name: h.Name, at: fmt.Sprintf("at col %d", col)}
			hosts = append(hosts, h)
		}
		start = end + 1
	}
	return hosts, nil
}

// itemEnd is where the item of list that starts at start ends: its first
// comma outside brackets (a hostlist's "gpu[1,3]" holds commas), or the
// list's end.
func itemEnd(list string, start int) int {
	depth := 0
	for i := start; i < len(list); i++ {
		switch list[i] {
		case '[':
			depth++
		case ']':
			depth = max(depth-1, 0)
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
	return len(list)
}

// parseListItem parses one item of --hosts: one host (parseHostItem), or,
// with a bracket group after the first character, the hosts of a Slurm
// hostlist, "gpu[01-04]:8", each with the item's count.
func parseListItem(item string, col int, where func(col int) string) ([]Host, error) {
	if strings.IndexByte(item, '[') <= 0 {
		h, err := parseHostItem(item, col, where)
		return []Host{h}, err
	}
	expr, slots, slotCol := item, 0, 0
	if i := strings.LastIndexByte(item, ':'); i > strings.LastIndexByte(item, ']') {
		expr, slotCol = item[:i], col+i+1
		n, err := parseSlots(item[i+1:])
		if err != nil {
			return nil, &userr.InputError{Where: where(slotCol), Problem: fmt.Sprintf("hosts %s: %v", userr.Quote(expr), err), Fix: "write HOSTLIST:N with N at least 1"}
		}
		slots = n
	}
	names, _, err := expandHostlist("hostlist", expr)
	if err != nil {
		var input *userr.InputError
		if errors.As(err, &input) {
			return nil, &userr.InputError{Where: where(col), Problem: fmt.Sprintf("%s: %s", userr.Quote(expr), input.Problem), Fix: input.Fix + " (Slurm's hostlist syntax: gpu[01-04,07]:8)"}
		}
		return nil, err
	}
	hosts := make([]Host, 0, len(names))
	for _, name := range names {
		if problem, fix := hostNameProblem(name); problem != "" {
			return nil, &userr.InputError{Where: where(col), Problem: fmt.Sprintf("%s names %s: %s", userr.Quote(expr), userr.Quote(name), problem), Fix: fix}
		}
		hosts = append(hosts, Host{Name: name, Slots: slots})
	}
	return hosts, nil
}

// parseHostItem parses one "host[:N]" item that starts at column col; where
// renders the location of a column for errors.
func parseHostItem(item string, col int, where func(col int) string) (Host, error) {
	name, slotText, slotCol := item, "", 0
	switch colons := strings.Count(item, ":"); {
	case strings.HasPrefix(item, "["):
		closing := strings.IndexByte(item, ']')
		if closing < 0 {
			return Host{}, &userr.InputError{Where: where(col), Problem: fmt.Sprintf("unclosed '[' in %s", userr.Quote(item)), Fix: "write IPv6 addresses as [fe80::1]:8"}
		}
		name = item[1:closing]
		rest := item[closing+1:]
		if a, err := netip.ParseAddr(name); err != nil || !a.Is6() {
			return Host{}, &userr.InputError{Where: where(col + 1), Problem: fmt.Sprintf("%s in brackets is not an IPv6 address", userr.Quote(name)), Fix: "use brackets only around IPv6 addresses"}
		}
		switch {
		case rest == "":
		case rest[0] == ':':
			slotText, slotCol = rest[1:], col+closing+2
		default:
			return Host{}, &userr.InputError{Where: where(col + closing + 1), Problem: fmt.Sprintf("unexpected %s after ']'", userr.Quote(rest)), Fix: "write [ADDRESS]:SLOTS"}
		}
	case colons == 1:
		i := strings.IndexByte(item, ':')
		name, slotText, slotCol = item[:i], item[i+1:], col+i+1
		if name == "" {
			return Host{}, &userr.InputError{Where: where(col), Problem: "missing host name before ':'", Fix: "write HOST:SLOTS"}
		}
	case colons > 1:
		if err := bareIPv6(item, col, where); err != nil {
			return Host{}, err
		}
	}
	if problem, fix := hostNameProblem(name); problem != "" {
		return Host{}, &userr.InputError{Where: where(col), Problem: problem, Fix: fix}
	}
	h := Host{Name: name}
	if slotCol != 0 {
		n, err := parseSlots(slotText)
		if err != nil {
			return Host{}, &userr.InputError{Where: where(slotCol), Problem: fmt.Sprintf("host %s: %v", userr.Quote(name), err), Fix: "write HOST:N with N at least 1"}
		}
		h.Slots = n
	}
	return h, nil
}

// bareIPv6 accepts an item with several ':' as an IPv6 address without
// brackets, unless it is no address, or its last ':' could also start a
// slot count: "fe80::1:8" is an address, and also fe80::1 with 8 slots.
func bareIPv6(item string, col int, where func(col int) string) error {
	a, err := netip.ParseAddr(item)
	if err != nil || !a.Is6() {
		return &userr.InputError{Where: where(col), Problem: fmt.Sprintf("%s has more than one ':'", userr.Quote(item)), Fix: "write HOST:SLOTS; put IPv6 addresses in brackets, [fe80::1]:8"}
	}
	i := strings.LastIndexByte(item, ':')
	if _, err := netip.ParseAddr(item[:i]); err == nil && item[i+1:] != "" && strings.Trim(item[i+1:], "0123456789") == "" {
		return &userr.InputError{
			Where:   where(col),
			Problem: fmt.Sprintf("%s is ambiguous: the address %s, or %s with %s slots", userr.Quote(item), item, item[:i], item[i+1:]),
			Fix:     fmt.Sprintf("write [%s] for the address, [%s]:%s for the slots", item, item[:i], item[i+1:]),
		}
	}
	return nil
}

// parseSlots parses a slot count: decimal digits only, 1..maxSlots.
func parseSlots(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("missing slot count")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("slot count %s is not a number", userr.Quote(s))
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxSlots {
		return 0, fmt.Errorf("slot count %s is too large (at most %d)", userr.Quote(s), maxSlots)
	}
	if n == 0 {
		return 0, fmt.Errorf("slot count is 0")
	}
	return n, nil
}

// at renders a Where with a 1-based column.
func at(where string, col int) string {
	return fmt.Sprintf("%s (col %d)", where, col)
}
