package launch

import (
	"bytes"
	"io"
	"time"
)

// statusLine is the live status kept under the output on a terminal
// (Options.Status): the writer goroutine erases it before it writes
// lines and draws it again once it has nothing more to write, at most
// every statusEvery unless a refresh asks; nothing else touches it.
type statusLine struct {
	w     io.Writer
	text  func(Counts) string
	steps func() int64 // the run's steps so far (stepCounter.total); nil: none
	color bool

	lines int64     // newlines written so far
	open  bool      // the output's last line is not ended (a worker's partial line): no status under it
	shown bool      // the line is on the screen
	drawn time.Time // when it was last drawn
	now   func() time.Time
}

// statusEvery bounds how often output alone redraws the status line, so a
// flood of lines is not doubled by redraws; the ticker redraws it anyway.
const statusEvery = 200 * time.Millisecond

func newStatusLine(w io.Writer, text func(Counts) string, steps func() int64, color bool) *statusLine {
	if w == nil || text == nil {
		return nil
	}
	return &statusLine{w: w, text: text, steps: steps, color: color, now: time.Now}
}

// Counts are what the status line is given each time it is drawn.
type Counts struct {
	Lines int64 // lines written so far
	Steps int64 // training steps so far: each attempt's most advanced worker's, added up
}

func (l *statusLine) wrote(b []byte) {
	if l != nil && len(b) > 0 {
		l.lines += int64(bytes.Count(b, []byte{'\n'}))
		l.open = b[len(b)-1] != '\n'
	}
}

// erase clears the status line, leaving the cursor at the start of it.
func (l *statusLine) erase() {
	if l == nil || !l.shown {
		return
	}
	_, _ = io.WriteString(l.w, "\r\x1b[K")
	l.shown = false
}

// draw writes the status line (no newline) unless it was drawn less than
// statusEvery ago and force is off.
func (l *statusLine) draw(force bool) {
	if l == nil || l.open {
		return // drawn after the open line, it would join it; erased, it would take it along
	}
	now := l.now()
	if !force && now.Sub(l.drawn) < statusEvery {
		return
	}
	c := Counts{Lines: l.lines}
	if l.steps != nil {
		c.Steps = l.steps()
	}
	text := l.text(c)
	l.erase()
	if text == "" {
		return
	}
	if l.color {
		text = "\x1b[2m" + text + colorReset // dim: it is not output
	}
	_, _ = io.WriteString(l.w, text)
	l.shown, l.drawn = true, now
}
