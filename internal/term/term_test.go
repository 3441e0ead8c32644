package term

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair and returns its terminal end.
func openPTY(t *testing.T) (tty *os.File, master *os.File) {
	t.Helper()
	s, m, err := OpenPTY(0, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return s, m
}

// TestOpenPTY: what is written to the terminal end is read, byte for
// byte, from the master; the size is set; the end reads as EOF-like EIO
// once the terminal end is closed.
func TestOpenPTY(t *testing.T) {
	tty, m, err := OpenPTY(101, 33)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer m.Close()
	if c, r := Size(tty); c != 101 || r != 33 {
		t.Errorf("Size = %d×%d, want 101×33", c, r)
	}
	want := "a\r\nb\n\rbar 3/9\x1b[0m"
	tty.WriteString(want)
	tty.Close()
	got, _ := io.ReadAll(m)
	if string(got) != want {
		t.Errorf("read %q, want %q", got, want)
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestNotATerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	xterm := env(map[string]string{"TERM": "xterm"})
	for name, w := range map[string]any{"a buffer": &bytes.Buffer{}, "/dev/null": null} {
		w := w.(interface{ Write([]byte) (int, error) })
		if IsTerminal(w) || Live(w, xterm) || Color(w, xterm) || Width(w) != 0 {
			t.Errorf("%s taken for a terminal", name)
		}
		if !Color(w, env(map[string]string{"FORCE_COLOR": "1"})) || Color(w, env(map[string]string{"FORCE_COLOR": "0"})) ||
			Color(w, env(map[string]string{"FORCE_COLOR": "1", "NO_COLOR": "1"})) {
			t.Errorf("%s: FORCE_COLOR=1 must colour it, FORCE_COLOR=0 not, NO_COLOR wins", name)
		}
	}
}

func TestTerminal(t *testing.T) {
	tty, _ := openPTY(t)
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 93, Row: 20}); err != nil {
		t.Fatal(err)
	}
	if !IsTerminal(tty) {
		t.Fatal("a pty is not a terminal")
	}
	if w := Width(tty); w != 93 {
		t.Errorf("Width = %d, want 93", w)
	}
	// A resize is seen at the next call.
	unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 40, Row: 20})
	if w := Width(tty); w != 40 {
		t.Errorf("after a resize, Width = %d, want 40", w)
	}
	for _, tc := range []struct {
		env         map[string]string
		live, color bool
	}{
		{map[string]string{"TERM": "xterm-256color"}, true, true},
		{map[string]string{"TERM": "xterm", "NO_COLOR": "1"}, true, false},
		{map[string]string{"TERM": "dumb"}, false, false},
		{map[string]string{}, false, true},
		{map[string]string{"TERM": "dumb", "FORCE_COLOR": "1"}, false, true},
		{map[string]string{"TERM": "xterm", "FORCE_COLOR": "1", "NO_COLOR": "1"}, true, false},
	} {
		if got := Live(tty, env(tc.env)); got != tc.live {
			t.Errorf("Live with %v = %v", tc.env, got)
		}
		if got := Color(tty, env(tc.env)); got != tc.color {
			t.Errorf("Color with %v = %v", tc.env, got)
		}
	}
}

func TestSameFile(t *testing.T) {
	tty, _ := openPTY(t)
	dir := t.TempDir()
	a, err := os.Create(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a2, err := os.OpenFile(dir+"/a", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	b, err := os.Create(dir + "/b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tty2, err := os.OpenFile(tty.Name(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty2.Close()
	var buf bytes.Buffer
	for _, tt := range []struct {
		name string
		x, y interface{ Write([]byte) (int, error) }
		want bool
	}{
		{"one file twice", a, a, true},
		{"one file opened twice (>> f 2>> f)", a, a2, true},
		{"two files", a, b, false},
		{"one terminal", tty, tty2, true},
		{"terminal and file", tty, a, false},
		{"not a file", &buf, a, false},
	} {
		if got := SameFile(tt.x, tt.y); got != tt.want {
			t.Errorf("%s: SameFile = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestStamper: nothing changes until Enable; then each line begins with
// the time, however the writes cut the lines.
func TestStamper(t *testing.T) {
	var out strings.Builder
	at := time.Date(2026, 12, 6, 21, 40, 1, 123456789, time.UTC)
	s := &Stamper{W: &out, Now: func() time.Time { return at }}
	fmt.Fprint(s, "before\n")
	s.Enable()
	fmt.Fprint(s, "gorun: one\ngorun: tw")
	fmt.Fprint(s, "o\n\ngorun: three\n")
	want := "before\n" +
		"2026-12-06T21:40:01.123Z gorun: one\n" +
		"2026-12-06T21:40:01.123Z gorun: two\n" +
		"2026-12-06T21:40:01.123Z \n" +
		"2026-12-06T21:40:01.123Z gorun: three\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// TestStamperIsItsFile: a Stamper over a terminal is a terminal (gorun
// preflight's stderr), with its size; over a pipe it is none.
func TestStamperIsItsFile(t *testing.T) {
	tty, _ := openPTY(t)
	if !IsTerminal(&Stamper{W: tty}) {
		t.Error("a Stamper over a terminal is no terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(&Stamper{W: w}) {
		t.Error("a Stamper over a pipe is a terminal")
	}
}
