package userr

import (
	"strings"
	"testing"
)

func TestInputErrorEscapesControls(t *testing.T) {
	tests := []struct {
		name string
		err  InputError
		want string
	}{
		{"plain", InputError{Where: "w", Problem: "p", Fix: "f"}, "w: p (f)"},
		{"no where, no fix", InputError{Problem: "p"}, "p"},
		{"ESC in where", InputError{Where: "--x\x1b[31m", Problem: "p"}, `--x\x1b[31m: p`},
		{"C0 controls", InputError{Problem: "a\x00b\tc\nd\re\x7f"}, `a\x00b\x09c\x0ad\x0de\x7f`},
		{"C1 controls", InputError{Problem: "a\u0085b\u009bc"}, `a\u0085b\u009bc`},
		{"separators and bidi controls", InputError{Problem: "a\u2028b\u202ec\u2066d\u200fe"}, `a\u2028b\u202ec\u2066d\u200fe`},
		{"bytes that are not UTF-8, never Latin-1", InputError{Problem: "caf\xe9 \xc3"}, `caf\xe9 \xc3`},
		{"UTF-8 letters kept", InputError{Where: "hôte", Problem: "Grüße, 東京, ☃"}, "hôte: Grüße, 東京, ☃"},
		{"in the fix too", InputError{Problem: "p", Fix: "\x1b]0;x\x07"}, `p (\x1b]0;x\x07)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEchoAndQuote(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	tests := []struct {
		name, in, echo, quote string
	}{
		{"short", "abc", "abc", `"abc"`},
		{"exactly the limit", strings.Repeat("a", MaxEcho), strings.Repeat("a", MaxEcho), `"` + strings.Repeat("a", MaxEcho) + `"`},
		{"one over", strings.Repeat("a", MaxEcho+1), strings.Repeat("a", MaxEcho) + "…(81 bytes)", `"` + strings.Repeat("a", MaxEcho) + `"…(81 bytes)`},
		{"cut on runes, not bytes", long, strings.Repeat("é", MaxEcho) + "…(200 bytes)", `"` + strings.Repeat("é", MaxEcho) + `"…(200 bytes)`},
		{"controls quoted", "a\x1bb", "a\x1bb", `"a\x1bb"`},
		{"invalid bytes count as one rune", strings.Repeat("\xff", MaxEcho+1), strings.Repeat("\xff", MaxEcho) + "…(81 bytes)", `"` + strings.Repeat(`\xff`, MaxEcho) + `"…(81 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Echo(tt.in); got != tt.echo {
				t.Errorf("Echo = %q, want %q", got, tt.echo)
			}
			if got := Quote(tt.in); got != tt.quote {
				t.Errorf("Quote = %q, want %q", got, tt.quote)
			}
		})
	}
}
