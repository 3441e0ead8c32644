package pystack

import (
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// ParseFaulthandler reads what a process wrote to stderr while
// faulthandler dumped its stacks: the dump (from "Fatal Python error:"
// to "Extension modules:", or a bare "Thread 0x… (most recent call
// first):" block) becomes a Dump, whose Text holds those lines, and every
// other line is returned in rest, in order, for the caller to pass on as
// the worker's ordinary output.
//
// It reads what CPython 3.8 to 3.14 write: "Current thread 0x…" and
// "Thread 0x…" headers (3.14 adds the thread's name in brackets),
// "Stack (most recent call first):" for a dump of one thread, frames as
// `  File "x.py", line 5 in f` (line "???" when unknown), "  ..." past
// 100 frames, "  <no Python frame>", "Garbage-collecting" (the signal came
// during a collection), and 3.14's C stack section, which it
// keeps in Text but not in the frames. Only the first dump's threads are
// read; a second one (another process on the same stderr) stays in Text.
func ParseFaulthandler(text string) (d Dump, rest string) {
	d.Tool = ToolFaulthandler
	var dump, other strings.Builder
	in, done := false, false // inside a dump; the first dump's threads are read
	var cur *Thread
	cstack := false // inside 3.14's C stack section
	for _, l := range strings.SplitAfter(text, "\n") {
		if l == "" {
			continue
		}
		line := strings.TrimRight(l, "\r\n")
		switch {
		case strings.HasPrefix(line, "Fatal Python error: "):
			if in || len(d.Threads) > 0 {
				done = true
			}
			in, cur, cstack = true, nil, false
		case threadHeader().MatchString(line):
			if !in && len(d.Threads) > 0 {
				done = true
			}
			in, cstack = true, false
			if !done {
				m := threadHeader().FindStringSubmatch(line)
				d.Threads = append(d.Threads, Thread{ID: m[2], Name: m[4], Current: m[1] == "Current thread"})
				cur = &d.Threads[len(d.Threads)-1]
			}
		case line == "Stack (most recent call first):":
			in, cstack = true, false
			if !done {
				d.Threads = append(d.Threads, Thread{Current: true})
				cur = &d.Threads[len(d.Threads)-1]
			}
		case in && strings.HasSuffix(line, "C stack trace (most recent call first):"):
			cstack, cur = true, nil
		case in && cstack && strings.HasPrefix(line, "  "):
		case in && strings.HasPrefix(line, "  File "):
			if f, ok := parseFaultFrame(line); ok && cur != nil {
				cur.Frames = append(cur.Frames, f)
			}
		case in && line == "  ...":
			if cur != nil {
				cur.Truncated = true
			}
		case in && (line == "..." || strings.HasPrefix(line, "  <")):
		case in && line == "":
			cur = nil
		case in && strings.HasPrefix(line, "Extension modules: "):
			dump.WriteString(l)
			in, cur = false, nil
			continue
		case in && strings.HasPrefix(line, "Python runtime state: "):
		case in && line == "Garbage-collecting": // the signal came during a collection (at exit, say)
		default:
			in, cur = false, nil
			other.WriteString(l)
			continue
		}
		dump.WriteString(l)
	}
	d.Text = cutText(dump.String(), MaxText)
	return d, other.String()
}

// threadHeader matches faulthandler's line before each thread's frames.
var threadHeader = lazyre.New(`^(Current thread|Thread) (0x[0-9a-fA-F]+)( \[(.*)\])? \(most recent call first\):$`)

// parseFaultFrame reads `  File "x.py", line 5 in f`.
func parseFaultFrame(line string) (Frame, bool) {
	s := strings.TrimPrefix(line, "  File \"")
	i := strings.LastIndex(s, "\", line ")
	if i < 0 {
		return Frame{}, false
	}
	f := Frame{File: s[:i]}
	s = s[i+len("\", line "):]
	num, fn, ok := strings.Cut(s, " in ")
	if !ok {
		return Frame{}, false
	}
	f.Line, _ = strconv.Atoi(num) // "???": 0
	f.Func = fn
	return f, true
}
