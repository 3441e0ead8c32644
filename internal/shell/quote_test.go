package shell

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// hostileWords are strings a shell would otherwise expand, split or run,
// and the plain words that must stay readable.
var hostileWords = []struct {
	name, in, want string
}{
	{"empty", "", "''"},
	{"plain", "train.py", "train.py"},
	{"path", "/opt/venv/bin/python3", "/opt/venv/bin/python3"},
	{"cpu list", "0-11,96-107", "0-11,96-107"},
	{"colon", "expandable_segments:True", "expandable_segments:True"},
	{"percent", "%s", "%s"},
	{"lone dash", "-", "-"},
	{"double dash", "--", "--"},
	{"flag no equals", "-u", "-u"},
	{"echo flag", "-n", "-n"},
	{"option with equals", "--lr=3e-4", "'--lr=3e-4'"},
	{"option with equals 2", "--nnodes=2", "'--nnodes=2'"},
	{"option with variable", "--x=$y", "'--x=$y'"},
	{"assignment", "A=b", "'A=b'"},
	{"space", "a b", "'a b'"},
	{"only space", " ", "' '"},
	{"single quote", "it's", `'it'\''s'`},
	{"only quote", "'", `''\'''`},
	{"two quotes", "''", `''\'''\'''`},
	{"double quote", `say "hi"`, `'say "hi"'`},
	{"backslash", `a\b`, `'a\b'`},
	{"backslash quote", `\\'`, `'\\'\'''`},
	{"command substitution", "$(rm -rf /)", "'$(rm -rf /)'"},
	{"backticks", "`id`", "'`id`'"},
	{"variable", "$HOME", "'$HOME'"},
	{"braced variable", "${HOME}", "'${HOME}'"},
	{"newline", "a\nb", "'a\nb'"},
	{"tab", "a\tb", "'a\tb'"},
	{"glob", "*", "'*'"},
	{"question glob", "?", "'?'"},
	{"brackets", "[abc]", "'[abc]'"},
	{"tilde", "~", "'~'"},
	{"tilde path", "~/x", "'~/x'"},
	{"tilde user", "~root", "'~root'"},
	{"semicolon", "a;reboot", "'a;reboot'"},
	{"and", "a&&b", "'a&&b'"},
	{"pipe and redirect", "a|b>c<d&e", "'a|b>c<d&e'"},
	{"redirect", ">x", "'>x'"},
	{"braces", "{a,b}", "'{a,b}'"},
	{"hash", "#comment", "'#comment'"},
	{"inner hash", "a#b", "'a#b'"},
	{"bang", "!!", "'!!'"},
	{"quotes mixed", `'"'"'`, `''\''"'\''"'\'''`},
	{"unicode", "ünïcødé ✓", "'ünïcødé ✓'"},
	{"invalid utf8", "\xff\xfe", "'\xff\xfe'"},
}

// TestQuote checks each word's quoting and its real round trip: a shell
// given the quoted word hands the program exactly the original bytes; and
// all of them at once through QuoteArgv split back into the same argv.
func TestQuote(t *testing.T) {
	for _, tc := range hostileWords {
		t.Run(tc.name, func(t *testing.T) {
			got := Quote(tc.in)
			if got != tc.want {
				t.Errorf("Quote(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if back := shellPrint(t, "%s", got); back != tc.in {
				t.Errorf("sh gave %q for Quote(%q) = %s", back, tc.in, got)
			}
		})
	}
	t.Run("QuoteArgv splits back to argv", func(t *testing.T) {
		if got := QuoteArgv(nil); got != "" {
			t.Errorf("QuoteArgv(nil) = %q", got)
		}
		words := make([]string, len(hostileWords))
		for i, w := range hostileWords {
			words[i] = w.in
		}
		// printf repeats its format for every argument: one NUL-terminated word each.
		out := shellPrint(t, `%s\0`, QuoteArgv(words))
		got := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
		if strings.Join(got, "\x01") != strings.Join(words, "\x01") {
			t.Errorf("shell split %d words into\n%q\nwant\n%q", len(words), got, words)
		}
	})
}

// shellPrint runs `sh -c "printf 'format' <quoted>"` and returns what it
// printed.
func shellPrint(t testing.TB, format, quoted string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("sh", "-c", "printf '"+format+"' "+quoted)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh -c printf %s: %v: %s", quoted, err, stderr.Bytes())
	}
	return string(out)
}

func FuzzQuote(f *testing.F) {
	for _, tc := range hostileWords {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			t.Skip("argv cannot hold NUL")
		}
		if got := shellPrint(t, "%s", Quote(s)); got != s {
			t.Fatalf("sh gave %q for Quote(%q) = %s", got, s, Quote(s))
		}
	})
}
