// Package term says what an output stream can do: whether it is a
// terminal, whether it can redraw a line in place, whether it takes colour,
// and how large it is now. It reads the stream's file descriptor and the
// variables it is given (TERM, NO_COLOR); it keeps no state, so a size is
// read again on every call and a resized terminal is followed. It also
// opens pseudo-terminals, for a worker that should see one.
package term

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
	xterm "golang.org/x/term"
)

// IsTerminal reports whether w is a terminal: an *os.File whose descriptor
// the terminal driver answers for (not /dev/null, which is a character
// device but no terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := file(w)
	return ok && xterm.IsTerminal(int(f.Fd()))
}

// file is the *os.File w writes to: w itself, or the file under a
// Stamper (gorun's stderr).
func file(w io.Writer) (*os.File, bool) {
	if s, ok := w.(*Stamper); ok {
		w = s.W
	}
	f, ok := w.(*os.File)
	return f, ok
}

// Live reports whether w can keep a line redrawn in place (a progress or
// status line): a terminal whose TERM is set and is not "dumb".
func Live(w io.Writer, getenv func(string) string) bool {
	t := getenv("TERM")
	return t != "" && t != "dumb" && IsTerminal(w)
}

// Color reports whether w takes ANSI colour: never with NO_COLOR set and
// not empty (no-color.org); always with FORCE_COLOR set, not empty and not
// "0" (force-color.org: a pipe to a pager or a CI log that shows colour);
// else on a terminal that is not "dumb".
func Color(w io.Writer, getenv func(string) string) bool {
	switch {
	case getenv("NO_COLOR") != "":
		return false
	case getenv("FORCE_COLOR") != "" && getenv("FORCE_COLOR") != "0":
		return true
	}
	return getenv("TERM") != "dumb" && IsTerminal(w)
}

// SameFile reports whether a and b write to the same file (the same
// device and inode: one terminal, or a shell's 2>&1), where the order
// between what goes to each is seen.
func SameFile(a, b io.Writer) bool {
	fa, ok1 := file(a)
	fb, ok2 := file(b)
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
	f, ok := file(w)
	if !ok {
		return 0
	}
	width, _, err := xterm.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}

// Size is w's size in columns and rows now; 0, 0 when w is not a terminal
// or does not say.
func Size(w io.Writer) (cols, rows int) {
	f, ok := file(w)
	if !ok {
		return 0, 0
	}
	cols, rows, err := xterm.GetSize(int(f.Fd()))
	if err != nil {
		return 0, 0
	}
	return cols, rows
}

// OpenPTY opens a pseudo-terminal pair: tty, the terminal end, for a
// process's streams, and master, where what it writes is read. Output is
// passed raw (no "\n" made "\r\n"), so what is read is what was written.
// cols and rows set its size when positive. Both ends are close-on-exec;
// tty is nobody's controlling terminal. master stays non-blocking, so a
// Close ends a Read waiting on it.
func OpenPTY(cols, rows int) (tty, master *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	fail := func(what string, err error) (*os.File, *os.File, error) {
		m.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	var n uint32
	err = control(m, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return err
		}
		var err error
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		return err
	})
	if err != nil {
		return fail("unlock a pseudo-terminal", err)
	}
	t, err := os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open a pseudo-terminal", err)
	}
	err = control(t, func(fd int) error {
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		tio.Oflag &^= unix.OPOST
		return unix.IoctlSetTermios(fd, unix.TCSETS, tio)
	})
	if err == nil && cols > 0 && rows > 0 {
		err = SetSize(t, cols, rows)
	}
	if err != nil {
		t.Close()
		return fail("set up a pseudo-terminal", err)
	}
	return t, m, nil
}

// SetSize sets a terminal's size (either end of a pseudo-terminal).
func SetSize(f *os.File, cols, rows int) error {
	return control(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
}

// control runs fn on f's descriptor without making it blocking (as
// os.File.Fd would).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
