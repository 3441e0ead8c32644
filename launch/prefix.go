package launch

import (
	"cmp"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/term"
	"github.com/gorun/gorun/internal/wire"
)

// Prefix says how the workers' lines are marked (Options.Prefix).
type Prefix struct {
	// Template, when set, is TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: a
	// worker's lines begin with it, as torchrun's --tee lines do, its
	// fields filled as Python's string.Template.safe_substitute fills
	// them: torchrun's ${role_name}, ${rank} (global), ${local_rank} and
	// ${pid}, and gorun's ${node} (the node's name in the host list) and
	// ${hostname} (the node's own). A field it does not know stays as
	// written.
	Template string
	// Role is torchrun's --role: ${role_name}, and the "default" of
	// torchrun's own "[default0]:".
	Role string
	// Tee says, per local rank, which streams torchrun's --tee copies to
	// its console with its prefix (bit 1 stdout, bit 2 stderr). In plain
	// mode, where gorun prints what torchrun would, those streams' lines
	// carry that prefix. Nil: none.
	Tee func(localRank int) int
	// Stamp begins each line of the nodes with the time it reached gorun,
	// RFC 3339 with milliseconds (--worker-timestamps).
	Stamp bool
}

// appendStamp appends the time t and a space.
func appendStamp(dst []byte, t time.Time) []byte {
	return append(t.AppendFormat(dst, term.StampLayout), ' ')
}

// forWorker is the prefix of the lines of one stream (bit: 1 stdout, 2
// stderr) of the worker st says started on log's node, and of the pieces
// after the first of an over-long line. nil, nil in plain mode where
// torchrun prints the stream as the worker wrote it.
func (p Prefix) forWorker(log *nodeLog, st wire.WorkerStarted, bit int) (line, cont []byte) {
	if log.plain {
		if p.Tee == nil || p.Tee(st.LocalRank)&bit == 0 {
			return nil, nil
		}
		if p.Template != "" {
			return []byte(p.fill(log.name, st)), nil
		}
		return []byte("[" + cmp.Or(p.Role, "default") + strconv.Itoa(st.LocalRank) + "]:"), nil
	}
	if p.Template != "" {
		s := p.fill(log.name, st)
		if log.color != "" {
			s = log.color + s + colorReset
		}
		return []byte(s), []byte(s + string(contMarker))
	}
	return appendPrefix(nil, log.name, log.color, st.LocalRank, st.Rank, false),
		appendPrefix(nil, log.name, log.color, st.LocalRank, st.Rank, true)
}

// fill fills Template's fields for the worker st on node.
func (p Prefix) fill(node string, st wire.WorkerStarted) string {
	f := p.torchrunFields(st, st.PID)
	f["node"], f["hostname"] = node, cmp.Or(st.Host, node)
	return safeSubstitute(p.Template, f)
}

// torchrunFields are the template's fields torchrun itself fills, with
// pid as ${pid}.
func (p Prefix) torchrunFields(st wire.WorkerStarted, pid int) map[string]string {
	return map[string]string{
		"role_name":  cmp.Or(p.Role, "default"),
		"rank":       strconv.Itoa(st.Rank),
		"local_rank": strconv.Itoa(st.LocalRank),
		"pid":        strconv.Itoa(pid),
	}
}

// safeSubstitute is Python's string.Template(t).safe_substitute(fields):
// "$$" is "$", "$name" and "${name}" are the field's value, and anything
// else (a field not in fields, a "$" before no name) stays as written.
// Names are ASCII letters, digits and '_', not starting with a digit.
func safeSubstitute(t string, fields map[string]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(t, '$')
		if i < 0 {
			b.WriteString(t)
			return b.String()
		}
		b.WriteString(t[:i])
		t = t[i:]
		switch {
		case strings.HasPrefix(t, "$$"):
			b.WriteByte('$')
			t = t[2:]
			continue
		case strings.HasPrefix(t, "${"):
			if n := identLen(t[2:]); n > 0 && len(t) > 2+n && t[2+n] == '}' {
				if v, ok := fields[t[2:2+n]]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(t[:3+n])
				}
				t = t[3+n:]
				continue
			}
		default:
			if n := identLen(t[1:]); n > 0 {
				if v, ok := fields[t[1:1+n]]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(t[:1+n])
				}
				t = t[1+n:]
				continue
			}
		}
		b.WriteByte('$')
		t = t[1:]
	}
}

// identLen is the length of the identifier s begins with (Python's
// string.Template idpattern, case-insensitive ASCII): 0 when none.
func identLen(s string) int {
	n := 0
	for n < len(s) {
		c := s[n]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || n > 0 && c >= '0' && c <= '9' {
			n++
			continue
		}
		break
	}
	return n
}

// torchrunTee is what torchrun's --tee puts before its copy of a line of
// the worker st says started where the template is set: the template
// filled with torchrun's own fields, whose ${pid} is the process it
// started (gorun's supervisor of the worker). nil without a template.
func (p Prefix) torchrunTee(st wire.WorkerStarted) []byte {
	if p.Template == "" {
		return nil
	}
	return []byte(safeSubstitute(p.Template, p.torchrunFields(st, st.Supervisor)))
}
