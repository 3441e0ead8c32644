package shell

import "strings"

// Quote returns s quoted for a POSIX shell so that the shell reads it back as
// exactly one word equal to s.
//
// Words made only of characters no shell treats specially are returned as
// they are, so commands stay readable in logs and plans; anything else is
// wrapped in single quotes, and each single quote inside closes the quoting,
// adds an escaped quote and reopens:
//
//	it's  ->  'it'\''s'
//
// '=' is not in the plain set, not even in "--lr=3e-4": a first word "A=b"
// would be an assignment, and one rule for every position is easier to
// trust than a rule per position.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if isPlainWord(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// QuoteArgv quotes each element with Quote and joins them with spaces, so the
// shell splits the result back into exactly argv.
func QuoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// isPlainWord reports whether every byte of s is one a POSIX shell passes
// through unchanged in any word position.
func isPlainWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("@%+,./:_-", c) >= 0:
		default:
			return false
		}
	}
	return true
}
