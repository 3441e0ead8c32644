package pystack

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// pySpyTrace is one thread of `py-spy dump --json` (py-spy's StackTrace,
// the fields read here; py-spy has printed them since 0.2).
type pySpyTrace struct {
	ThreadID   uint64  `json:"thread_id"`
	ThreadName *string `json:"thread_name"`
	OSThreadID *uint64 `json:"os_thread_id"`
	Active     bool    `json:"active"`
	OwnsGIL    bool    `json:"owns_gil"`
	Frames     []struct {
		Name          string  `json:"name"`
		Filename      string  `json:"filename"`
		ShortFilename *string `json:"short_filename"`
		Module        *string `json:"module"` // set for native frames only
		Line          int     `json:"line"`
	} `json:"frames"`
}

// ParsePySpy reads the output of `py-spy dump --json --pid P`: a JSON
// list of threads, each with its frames innermost first (with --native,
// native frames among them, line 0). Text is that dump as py-spy's own
// text form prints it, main thread first.
func ParsePySpy(out []byte) (Dump, error) {
	var traces []pySpyTrace
	if err := json.Unmarshal(out, &traces); err != nil {
		return Dump{}, fmt.Errorf("read py-spy's JSON: %w", err)
	}
	d := Dump{Tool: ToolPySpy}
	for _, tr := range traces {
		t := Thread{ID: fmt.Sprintf("%#x", tr.ThreadID), Idle: !tr.Active}
		if tr.OSThreadID != nil {
			t.ID = strconv.FormatUint(*tr.OSThreadID, 10)
		}
		if tr.ThreadName != nil {
			t.Name = *tr.ThreadName
		}
		for _, f := range tr.Frames {
			t.Frames = append(t.Frames, Frame{File: f.Filename, Line: f.Line, Func: f.Name, Native: f.Module != nil})
		}
		d.Threads = append(d.Threads, t)
	}
	// py-spy prints the threads in the reverse of its list: main first.
	var b strings.Builder
	for i := len(traces) - 1; i >= 0; i-- {
		tr, t := traces[i], d.Threads[i]
		status := "idle"
		switch {
		case tr.Active && tr.OwnsGIL:
			status = "active+gil"
		case tr.Active:
			status = "active"
		}
		fmt.Fprintf(&b, "Thread %s (%s)", t.ID, status)
		if t.Name != "" {
			fmt.Fprintf(&b, ": %q", t.Name)
		}
		b.WriteByte('\n')
		for j, f := range t.Frames {
			file := f.File
			if s := tr.Frames[j].ShortFilename; s != nil {
				file = *s
			}
			if f.Line != 0 {
				fmt.Fprintf(&b, "    %s (%s:%d)\n", f.Func, file, f.Line)
			} else {
				fmt.Fprintf(&b, "    %s (%s)\n", f.Func, file)
			}
		}
	}
	d.Text = cutText(b.String(), MaxText)
	return d, nil
}
