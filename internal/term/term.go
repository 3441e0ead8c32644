// Package term says what an output stream can do: whether it is a
// terminal, whether it can redraw a line in place, whether it takes colour,
// and how wide it is now. It reads the stream's file descriptor and the
// variables it is given (TERM, NO_COLOR); it keeps no state, so a width is
// read again on every call and a resized terminal is followed.
package term

import (
	"io"
	"os"

	xterm "golang.org/x/term"
)

// IsTerminal reports whether w is a terminal: an *os.File whose descriptor
// the terminal driver answers for (not /dev/null, which is a character
// device but no terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && xterm.IsTerminal(int(f.Fd()))
}

// Live reports whether w can keep a line redrawn in place (a progress or
// status line): a terminal whose TERM is set and is not "dumb".
func Live(w io.Writer, getenv func(string) string) bool {
	t := getenv("TERM")
	return t != "" && t != "dumb" && IsTerminal(w)
}

// Color reports whether w takes ANSI colour: a terminal that is not
// "dumb", with NO_COLOR unset or empty (no-color.org).
func Color(w io.Writer, getenv func(string) string) bool {
	return getenv("NO_COLOR") == "" && getenv("TERM") != "dumb" && IsTerminal(w)
}

// SameFile reports whether a and b write to the same file (the same
// device and inode: one terminal, or a shell's 2>&1), where the order
// between what goes to each is seen.
func SameFile(a, b io.Writer) bool {
	fa, ok1 := a.(*os.File)
	fb, ok2 := b.(*os.File)
	if !ok1 || !ok2 {
		return false
	}
	sa, err1 := fa.Stat()
	sb, err2 := fb.Stat()
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// Width is w's width in columns now; 0 when w is not a terminal or does
// not say.
func Width(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	width, _, err := xterm.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}
