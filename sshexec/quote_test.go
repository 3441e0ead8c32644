package sshexec

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// hostileWords are strings a shell would otherwise expand, split or run.
var hostileWords = []struct {
	name, in, want string
}{
	{"empty", "", "''"},
	{"plain", "train.py", "train.py"},
	{"path", "/opt/venv/bin/python3", "/opt/venv/bin/python3"},
	{"leading dash", "--lr=3e-4", "'--lr=3e-4'"},
	{"flag no equals", "-u", "-u"},
	{"assignment", "A=b", "'A=b'"},
	{"space", "a b", "'a b'"},
	{"single quote", "it's", `'it'\''s'`},
	{"only quote", "'", `''\'''`},
	{"double quote", `say "hi"`, `'say "hi"'`},
	{"command substitution", "$(rm -rf /)", "'$(rm -rf /)'"},
	{"backticks", "`id`", "'`id`'"},
	{"variable", "$HOME", "'$HOME'"},
	{"newline", "a\nb", "'a\nb'"},
	{"tab", "a\tb", "'a\tb'"},
	{"glob", "*", "'*'"},
	{"tilde", "~", "'~'"},
	{"tilde path", "~/x", "'~/x'"},
	{"semicolon", "a;reboot", "'a;reboot'"},
	{"pipe and redirect", "a|b>c<d&e", "'a|b>c<d&e'"},
	{"backslash", `a\b`, `'a\b'`},
	{"unicode", "ünïcødé ✓", "'ünïcødé ✓'"},
	{"braces", "{a,b}", "'{a,b}'"},
	{"hash", "#comment", "'#comment'"},
	{"bang", "!!", "'!!'"},
	{"brackets", "[abc]", "'[abc]'"},
	{"quotes mixed", `'"'"'`, `''\''"'\''"'\'''`},
	{"invalid utf8", "\xff\xfe", "'\xff\xfe'"},
}

func TestQuote(t *testing.T) {
	for _, tc := range hostileWords {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quote(tc.in); got != tc.want {
				t.Errorf("Quote(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestQuoteThroughShell checks the real round trip: a shell given the quoted
// word hands the program exactly the original bytes.
func TestQuoteThroughShell(t *testing.T) {
	for _, tc := range hostileWords {
		t.Run(tc.name, func(t *testing.T) {
			if got := shellEcho(t, Quote(tc.in)); got != tc.in {
				t.Errorf("sh gave %q for Quote(%q)", got, tc.in)
			}
		})
	}
}

func TestQuoteArgv(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		want string
	}{
		{"nil", nil, ""},
		{"one", []string{"uname", "-m"}, "uname -m"},
		{"empty element kept", []string{"printf", "%s|", "", "x"}, "printf '%s|' '' x"},
		{"hostile", []string{"echo", "$(id)", "a b"}, "echo '$(id)' 'a b'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := QuoteArgv(tc.argv); got != tc.want {
				t.Errorf("QuoteArgv(%q) = %q, want %q", tc.argv, got, tc.want)
			}
		})
	}
	t.Run("shell splits back to argv", func(t *testing.T) {
		var words []string
		for _, w := range hostileWords {
			words = append(words, w.in)
		}
		// printf repeats its format for every argument: one NUL-terminated word each.
		cmd := exec.Command("sh", "-c", "printf '%s\\0' "+QuoteArgv(words))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if len(got) != len(words) {
			t.Fatalf("shell split %d words into %d: %q", len(words), len(got), got)
		}
		for i := range words {
			if got[i] != words[i] {
				t.Errorf("word %d: got %q, want %q", i, got[i], words[i])
			}
		}
	})
}

// shellEcho runs `sh -c "printf %s <quoted>"` and returns what it printed.
func shellEcho(t testing.TB, quoted string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("sh", "-c", "printf %s "+quoted)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh -c printf %%s %s: %v: %s", quoted, err, stderr.Bytes())
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
		if got := shellEcho(t, Quote(s)); got != s {
			t.Fatalf("sh gave %q for Quote(%q) = %q", got, s, Quote(s))
		}
	})
}
