package pystack

import (
	"encoding/json"
	"slices"
	"strings"
)

// Dump is one process's stacks: every thread the dumper saw, in its order.
type Dump struct {
	// Tool is the dumper: ToolFaulthandler or ToolPySpy.
	Tool    string   `json:"tool"`
	Threads []Thread `json:"threads,omitempty"`
	// Text is the dump as the dumper printed it (py-spy's JSON rewritten
	// as py-spy's text), cut at MaxText; what the files on the head hold.
	Text string `json:"text,omitempty"`
	// Trimmed is set when threads were dropped to fit a frame (Fit).
	Trimmed bool `json:"trimmed,omitempty"`
}

// The dumpers.
const (
	ToolFaulthandler = "faulthandler"
	ToolPySpy        = "py-spy"
)

// Thread is one thread's stack.
type Thread struct {
	// ID is the thread's id as the dumper writes it: faulthandler's
	// "0x00007f..." (the pthread id), py-spy's OS thread id.
	ID string `json:"id"`
	// Name is the thread's name where the dumper gives it (py-spy;
	// faulthandler from Python 3.14).
	Name string `json:"name,omitempty"`
	// Current marks the thread faulthandler ran in ("Current thread").
	Current bool `json:"current,omitempty"`
	// Idle is py-spy's word for a thread not running.
	Idle bool `json:"idle,omitempty"`
	// Frames, innermost (most recent call) first.
	Frames []Frame `json:"frames,omitempty"`
	// Truncated is set when the dumper stopped before the outermost frame
	// (faulthandler writes 100 at most).
	Truncated bool `json:"truncated,omitempty"`
}

// Frame is one call.
type Frame struct {
	File string `json:"file"`
	Line int    `json:"line,omitempty"` // 0 when the dumper did not know
	Func string `json:"func"`
	// Native marks a frame of native code (py-spy --native): File is a
	// shared object or C source, not Python.
	Native bool `json:"native,omitempty"`
	// Source is the text of that line, trimmed, where it could be read
	// (AddSource).
	Source string `json:"source,omitempty"`
}

// MaxText bounds Dump.Text.
const MaxText = 256 << 10

// Fit makes the dump's JSON encoding at most limit bytes, so it fits one
// frame of the relay: Text is cut first, then every thread but the one
// that speaks for the process (Place) is dropped, then that thread's
// outer frames. It reports whether the dump changed.
func (d *Dump) Fit(limit int) bool {
	size := func() int { b, _ := json.Marshal(d); return len(b) }
	if size() <= limit {
		return false
	}
	// The text costs more encoded than raw (escapes): cut until it fits,
	// or is gone.
	for over := size() - limit; over > 0 && len(d.Text) > len(cutMark); over = size() - limit {
		d.Text = cutText(strings.TrimSuffix(d.Text, cutMark[1:]), max(0, len(d.Text)-over-len(cutMark)))
	}
	if size() > limit && len(d.Threads) > 1 {
		i, _ := d.speaker()
		d.Threads = []Thread{d.Threads[i]}
		d.Trimmed = true
	}
	for size() > limit && len(d.Threads) == 1 && len(d.Threads[0].Frames) > 1 {
		t := &d.Threads[0]
		t.Frames = t.Frames[:len(t.Frames)/2]
		t.Truncated, d.Trimmed = true, true
	}
	return true
}

const cutMark = "\n[gorun: cut here]\n"

// cutText cuts s to at most n bytes at a line's end, and says so.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && s[len(s)-1] != '\n' {
		s = s[:len(s)-1]
	}
	return s + cutMark[1:]
}

// DropDir takes out of the dump every frame of a file in dir, and every
// line of Text that names such a file: a worker run by gorun's pool has
// the pool's own frames under its script's, which a worker started by
// python has not.
func (d *Dump) DropDir(dir string) {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for i := range d.Threads {
		t := &d.Threads[i]
		t.Frames = slices.DeleteFunc(t.Frames, func(f Frame) bool { return strings.HasPrefix(f.File, prefix) })
	}
	if !strings.Contains(d.Text, prefix) {
		return
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(d.Text, "\n") {
		if !strings.Contains(l, prefix) {
			b.WriteString(l)
		}
	}
	d.Text = b.String()
}
