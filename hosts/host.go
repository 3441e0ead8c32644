package hosts

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gorun/gorun/internal/userr"
)

// Host is one node of the job, in launch order.
type Host struct {
	Name  string `json:"host"`
	Slots int    `json:"slots"` // processes (GPUs) to start there; 0 means not stated
	GPUs  []int  `json:"gpus"`  // GPU ids to use; nil means unknown (all of them)
	// Implied marks Slots that no command-line flag gave: those of a
	// hostfile or of the Slurm allocation (SLURM_GPUS_ON_NODE,
	// SLURM_TASKS_PER_NODE, ...; Slurm sets the tasks even when nobody
	// asked for them, 1 per node under `sbatch -N 3`). A
	// --nproc-per-node given on the command line wins over them, with a
	// note in the plan (docs/guide.md, "Explicit wins").
	Implied bool `json:"-"`
}

// Limits of RFC 1123 host names.
const (
	maxHostName  = 253
	maxHostLabel = 63
)

// hostNameFix is the usual fix for a refused host name.
const hostNameFix = "use a host name (letters, digits, '-' and '.'), an IPv4 address or an IPv6 address"

// hostNameProblem says what is wrong with a host name, or returns "" when
// it can name a node. Accepted are an IPv4 address, an IPv6 address (its
// zone, as in fe80::1%eth0, an interface name) and host names by RFC 1123:
// dot-separated labels of 1 to 63 letters, digits and hyphens that neither
// start nor end with a hyphen, 253 characters in all.
//
// Underscores are accepted in labels too, although RFC 1123 has none:
// OpenSSH and glibc's resolver take them, and some clusters name their
// nodes gpu_01. Refused besides: "user@host" (--ssh-user says who logs in),
// a trailing dot, and a name whose last label is all digits ("1.2.3",
// "10.0.0.256", "123"), which resolvers read as an IPv4 address in
// inet_aton's short forms. No accepted name starts with '-', so ssh never
// reads one as an option.
//
// fix is a suggestion for the userr.InputError the caller builds.
func hostNameProblem(name string) (problem, fix string) {
	if name == "" {
		return "empty host name", hostNameFix
	}
	q := userr.Quote(name)
	if a, err := netip.ParseAddr(name); err == nil {
		for _, c := range []byte(a.Zone()) {
			if !labelByte(c) {
				return fmt.Sprintf("address %s has a zone that is not an interface name", q), "write the zone as the interface's name, e.g. fe80::1%eth0"
			}
		}
		return "", ""
	}
	if name[0] == '-' {
		return fmt.Sprintf("host name %s starts with '-'", q), hostNameFix
	}
	if user, _, ok := strings.Cut(name, "@"); ok && user != "" {
		return fmt.Sprintf("host name %s has a user part", q), "give the host alone and the user with --ssh-user (or in ~/.ssh/config)"
	}
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Sprintf("host name %s has byte 0x%02x, which is not UTF-8", q, name[i]), hostNameFix
		case r >= utf8.RuneSelf || !(labelByte(byte(r)) || r == '.'):
			return fmt.Sprintf("host name %s has invalid character %s", q, quoteRune(r)), hostNameFix
		}
		i += size
	}
	if len(name) > maxHostName {
		return fmt.Sprintf("host name %s is %d characters long; the limit is %d", q, len(name), maxHostName), hostNameFix
	}
	labels := strings.Split(name, ".")
	for i, l := range labels {
		switch {
		case l == "" && i == len(labels)-1:
			return fmt.Sprintf("host name %s ends with '.'", q), "remove the final '.'"
		case l == "" && i == 0:
			return fmt.Sprintf("host name %s starts with '.'", q), "remove the leading '.'"
		case l == "":
			return fmt.Sprintf("host name %s has an empty label (\"..\")", q), "remove the extra '.'"
		case len(l) > maxHostLabel:
			return fmt.Sprintf("host name %s has a label of %d characters; the limit is %d", q, len(l), maxHostLabel), hostNameFix
		case l[0] == '-' || l[len(l)-1] == '-':
			return fmt.Sprintf("host name %s has label %s, which starts or ends with '-'", q, userr.Quote(l)), hostNameFix
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Sprintf("host name %s is not an IPv4 address, and a host name's last label cannot be all digits", q),
			"write an IPv4 address as four numbers from 0 to 255 (10.0.0.1), or give the host's name"
	}
	return "", ""
}

// CheckName refuses a name that cannot name a node, by the rules of
// hostNameProblem: nil when name is a host name, an IPv4 address or an IPv6
// address, else a *userr.InputError at where that says what is wrong and
// how to fix it. Other parsers (a --rdzv-endpoint's host) use it so that
// every host gorun reads follows one rule.
func CheckName(where, name string) error {
	if problem, fix := hostNameProblem(name); problem != "" {
		return &userr.InputError{Where: where, Problem: problem, Fix: fix}
	}
	return nil
}

// labelByte reports whether c may appear in a host name label.
func labelByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// quoteRune shows one character in quotes, escaped when it is not
// printable: ' ', '/', 'é', '\x1b'.
func quoteRune(r rune) string {
	return fmt.Sprintf("%q", r)
}

// localKey is the identity of every name for the machine gorun runs on.
const localKey = "(this machine)"

// hostKey is the identity used to find duplicates: host names are case
// insensitive (DNS), one address has several spellings (fe80::1 and
// fe80:0::1; ::ffff:10.0.0.1 and 10.0.0.1), and localhost, 127.0.0.1 and
// ::1 all name this machine.
func hostKey(name string) string {
	if a, err := netip.ParseAddr(name); err == nil {
		a = a.Unmap()
		if a.IsLoopback() {
			return localKey
		}
		return a.String()
	}
	lower := strings.ToLower(name)
	if lower == "localhost" {
		return localKey
	}
	return lower
}

// duplicateProblem says that the host name repeats first, which was seen
// at firstAt ("at col 3", "on line 2"), naming both spellings when they
// differ.
func duplicateProblem(name, first, firstAt string) string {
	if name == first {
		return fmt.Sprintf("duplicate host %s (first %s)", userr.Quote(name), firstAt)
	}
	if hostKey(name) == localKey {
		return fmt.Sprintf("duplicate host %s: it and %s %s both name this machine", userr.Quote(name), userr.Quote(first), firstAt)
	}
	return fmt.Sprintf("duplicate host %s (the same host as %s %s)", userr.Quote(name), userr.Quote(first), firstAt)
}

// firstSeen records where a host was first listed, for duplicateProblem.
type firstSeen struct {
	name string
	at   string
}

// Describe is the host as `gorun hosts` prints it: its name, its slots
// ("?" when not given) and its GPUs ("all" when not limited), tab
// separated.
func (h Host) Describe() string {
	slots := "?"
	if h.Slots > 0 {
		slots = strconv.Itoa(h.Slots)
	}
	gpus := "all"
	if h.GPUs != nil {
		ids := make([]string, len(h.GPUs))
		for i, g := range h.GPUs {
			ids[i] = strconv.Itoa(g)
		}
		gpus = strings.Join(ids, ",")
	}
	return h.Name + "\tslots=" + slots + "\tgpus=" + gpus
}
