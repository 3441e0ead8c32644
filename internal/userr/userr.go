package userr

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// InputError reports input that gorun refuses: a bad flag, a broken hostfile
// line, a Slurm expression Slurm itself would reject. main maps it to exit 2.
type InputError struct {
	Where   string // the flag, file:line:col, or variable at fault
	Problem string // what is wrong, in one sentence
	Fix     string // how to fix it; may be empty
}

// Error renders "Where: Problem (Fix)" as one line that is safe to print on
// a terminal. The fields echo what the user typed or what a file held, so
// control characters (an ESC that starts a terminal sequence, a CR that
// rewrites the line, a bidi override that reorders it) and bytes that are
// not UTF-8 are shown escaped, once, here; printable text, non-ASCII letters
// included, is kept as it is.
func (e *InputError) Error() string {
	var b strings.Builder
	if e.Where != "" {
		b.WriteString(e.Where)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	if e.Fix != "" {
		b.WriteString(" (")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return escapeControls(b.String())
}

// escapeControls writes C0 and C1 controls, DEL, line and paragraph
// separators and bidi controls as Go escapes (\x1b, \u202e), and each byte
// that is not UTF-8 as \xNN: it is never decoded as Latin-1.
func escapeControls(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || UnsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < utf8.RuneSelf && UnsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case UnsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Printable returns a message of several lines as a terminal may show it:
// each line's control characters escaped as in InputError, the line breaks
// kept. main prints every error through it, since errors quote what came
// from users, files and nodes.
func Printable(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = escapeControls(l)
	}
	return strings.Join(lines, "\n")
}

// UnsafeRune reports whether printing r could change what a terminal shows
// around it: C0 and C1 controls, DEL, line and paragraph separators, bidi
// controls. Error and Printable escape exactly these.
func UnsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r): // C0, DEL, C1
		return true
	case r == '\u2028', r == '\u2029': // line and paragraph separators
		return true
	case r == '\u061c', r == '\u200e', r == '\u200f', // bidi marks
		'\u202a' <= r && r <= '\u202e', '\u2066' <= r && r <= '\u2069': // bidi embeddings, overrides, isolates
		return true
	}
	return false
}

// MaxEcho is how many runes of one user value a message shows. Input can be
// anything (a 100k-character option, a binary hostfile line); a message
// shows enough to recognise it and says how long it was.
const MaxEcho = 80

// Echo returns s as a message shows it unquoted: at most MaxEcho runes,
// then "…(N bytes)" when s was longer. Bytes that are not UTF-8 count as one
// rune each and are left for InputError.Error to escape.
func Echo(s string) string {
	head, cut := cutRunes(s)
	if !cut {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", head, len(s))
}

// Quote returns s as a message shows it in quotes: Go syntax, as %q (so
// control characters and bytes that are not UTF-8 are escaped and letters
// are kept), cut after MaxEcho runes like Echo.
func Quote(s string) string {
	head, cut := cutRunes(s)
	if !cut {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(head), len(s))
}

// cutRunes returns the first MaxEcho runes of s and whether anything was
// left out.
func cutRunes(s string) (string, bool) {
	n := 0
	for i := 0; i < len(s); n++ {
		if n == MaxEcho {
			return s[:i], true
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s, false
}
