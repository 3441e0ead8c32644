package hosts

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gorun/gorun/internal/userr"
)

// ParseHostfile parses a hostfile named name (used only in error locations)
// with contents data. Two forms are accepted, and may be mixed line by line:
//
//   - DeepSpeed's: "host slots=N" on every line (deepspeed --hostfile).
//   - Open MPI's: "host", "host:N", "host slots=N", "host slots=N max_slots=M"
//     (max-slots is accepted too). A line without a count gives Slots 0,
//     not stated.
//
// DeepSpeed's form is a subset of Open MPI's, so every line is read by the
// Open MPI rules. '#' starts a comment anywhere on a line; blank lines are
// fine. The file is UTF-8 text: a UTF-8 byte order mark is skipped, and
// lines may end in LF, CRLF, or CR alone (an old Mac file, with no LF
// anywhere); UTF-16 (a byte order mark or NUL bytes) and bytes that are not
// UTF-8 are refused. A duplicate host (localhost, 127.0.0.1 and ::1 are
// one), a bad host name, a stray word, a missing or zero count, max_slots
// below slots, or a file without any host is a userr.InputError located as
// "name:line:col".
func ParseHostfile(name string, data []byte) ([]Host, error) {
	lines, err := hostfileLines(name, data)
	if err != nil {
		return nil, err
	}
	var hosts []Host
	seen := make(map[string]firstSeen) // host key → first sight
	form := formDeepSpeed              // until a line shows Open MPI syntax
	for i, line := range lines {
		lineNo := i + 1
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		where := func(col int) string { return fmt.Sprintf("%s:%d:%d", name, lineNo, col) }
		h, lineForm, err := parseHostfileLine(line, form, where)
		if err != nil {
			return nil, err
		}
		if lineForm == formBlank {
			continue
		}
		if lineForm == formMPI {
			form = formMPI
		}
		key := hostKey(h.Name)
		if first, dup := seen[key]; dup {
			return nil, &userr.InputError{
				Where:   where(firstField(line)),
				Problem: duplicateProblem(h.Name, first.name, first.at),
				Fix:     "list each host once with its total slots",
			}
		}
		seen[key] = firstSeen{name: h.Name, at: fmt.Sprintf("on line %d", lineNo)}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, &userr.InputError{
			Where:   name,
			Problem: "hostfile lists no hosts",
			Fix:     `write one "host slots=N" per line`,
		}
	}
	for i := range hosts {
		hosts[i].Implied = hosts[i].Slots > 0 // a file's count: --nproc-per-node given wins over it
	}
	return hosts, nil
}

// utf8BOM is the byte order mark some Windows editors put before UTF-8.
const utf8BOM = "\xef\xbb\xbf"

// hostfileLines checks that data is UTF-8 text and splits it into lines
// without their line ends.
func hostfileLines(name string, data []byte) ([]string, error) {
	const fix = "save the file as UTF-8, e.g. iconv -f UTF-16 -t UTF-8 FILE"
	if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		return nil, &userr.InputError{
			Where:   name + ":1:1",
			Problem: fmt.Sprintf("the file is UTF-16 (it starts with the byte order mark %X)", data[:2]),
			Fix:     fix,
		}
	}
	text := strings.TrimPrefix(string(data), utf8BOM)
	sep := "\n"
	if !strings.Contains(text, "\n") && strings.Contains(text, "\r") {
		sep = "\r" // an old Mac file: CR ends every line
	}
	lines := strings.Split(text, sep)
	for i, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		lines[i] = line
		where := func(off int) string { return fmt.Sprintf("%s:%d:%d", name, i+1, off+1) }
		if off := strings.IndexByte(line, 0); off >= 0 {
			return nil, &userr.InputError{Where: where(off), Problem: "NUL byte: the file looks like UTF-16, or is not text", Fix: fix}
		}
		if !utf8.ValidString(line) {
			off := 0
			for off < len(line) {
				r, size := utf8.DecodeRuneInString(line[off:])
				if r == utf8.RuneError && size == 1 {
					break
				}
				off += size
			}
			return nil, &userr.InputError{
				Where:   where(off),
				Problem: fmt.Sprintf("byte 0x%02x is not valid UTF-8", line[off]),
				Fix:     "save the file as UTF-8, e.g. iconv -f LATIN1 -t UTF-8 FILE",
			}
		}
	}
	return lines, nil
}

// field is one whitespace-separated word of a line and its 1-based column.
type field struct {
	text string
	col  int
}

// fields splits a line on spaces and tabs, keeping columns.
func fields(line string) []field {
	var out []field
	for i := 0; i < len(line); {
		if line[i] == ' ' || line[i] == '\t' {
			i++
			continue
		}
		j := i
		for j < len(line) && line[j] != ' ' && line[j] != '\t' {
			j++
		}
		out = append(out, field{text: line[i:j], col: i + 1})
		i = j
	}
	return out
}

func firstField(line string) int {
	if f := fields(line); len(f) > 0 {
		return f[0].col
	}
	return 1
}

// hostfileForm is the syntax a hostfile line (or the file so far) uses.
type hostfileForm int

const (
	formBlank     hostfileForm = iota // no host on the line
	formDeepSpeed                     // exactly "host slots=N"
	formMPI                           // any other Open MPI form
)

// fix suggests the syntax of the form the file has used so far, so a
// DeepSpeed user is not told about Open MPI and the other way round.
func (f hostfileForm) fix() string {
	if f == formMPI {
		return `write "host", "host:N" or "host slots=N [max_slots=M]"`
	}
	return `write "host slots=N"`
}

// parseHostfileLine parses one line with its comment removed; form is the
// file's form so far, used in error fixes.
func parseHostfileLine(line string, form hostfileForm, where func(col int) string) (Host, hostfileForm, error) {
	words := fields(line)
	if len(words) == 0 {
		return Host{}, formBlank, nil
	}
	h, err := parseHostItem(words[0].text, words[0].col, where)
	if err != nil {
		return Host{}, formBlank, err
	}
	countInName := h.Slots != 0
	var slots, maxSlots *field
	for k := range words[1:] {
		w := &words[1+k]
		key, _, hasEq := strings.Cut(w.text, "=")
		switch {
		case hasEq && key == "slots":
			if slots != nil || countInName {
				return Host{}, formBlank, &userr.InputError{Where: where(w.col), Problem: fmt.Sprintf("host %s: slots given twice", userr.Quote(h.Name)), Fix: "give the count once"}
			}
			slots = w
		case hasEq && (key == "max_slots" || key == "max-slots"):
			if maxSlots != nil {
				return Host{}, formBlank, &userr.InputError{Where: where(w.col), Problem: fmt.Sprintf("host %s: max_slots given twice", userr.Quote(h.Name)), Fix: "give max_slots once"}
			}
			maxSlots = w
		default:
			return Host{}, formBlank, &userr.InputError{Where: where(w.col), Problem: fmt.Sprintf("unexpected %s", userr.Quote(w.text)), Fix: form.fix()}
		}
	}
	if slots != nil {
		n, err := parseSlots(strings.TrimPrefix(slots.text, "slots="))
		if err != nil {
			return Host{}, formBlank, &userr.InputError{Where: where(slots.col), Problem: fmt.Sprintf("host %s: %v", userr.Quote(h.Name), err), Fix: `write "host slots=N" with N at least 1`}
		}
		h.Slots = n
	}
	if maxSlots != nil {
		_, value, _ := strings.Cut(maxSlots.text, "=")
		m, err := parseSlots(value)
		if err != nil {
			return Host{}, formBlank, &userr.InputError{Where: where(maxSlots.col), Problem: fmt.Sprintf("host %s: max_slots: %v", userr.Quote(h.Name), err), Fix: "write max_slots=M with M at least slots"}
		}
		if h.Slots > m {
			return Host{}, formBlank, &userr.InputError{Where: where(maxSlots.col), Problem: fmt.Sprintf("host %s: max_slots=%d is below slots=%d", userr.Quote(h.Name), m, h.Slots), Fix: "raise max_slots or lower slots"}
		}
	}
	lineForm := formMPI
	if slots != nil && maxSlots == nil && len(words) == 2 {
		lineForm = formDeepSpeed
	}
	return h, lineForm, nil
}
