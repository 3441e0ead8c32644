package pystack

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openTestSource reads the scripts of the real dumps from testdata/src,
// wherever they ran.
func openTestSource(name string) (io.ReadCloser, error) {
	for _, dir := range []string{"/tmp/dumps/", "/work/main/examples/gpu/"} {
		if rest, ok := strings.CutPrefix(name, dir); ok {
			return os.Open(filepath.Join("testdata", "src", rest))
		}
	}
	return nil, os.ErrNotExist
}

// TestLocateRealDumps: every real dump in testdata is read, its source
// lines filled in from the script, and placed: in which collective, or
// where in user code.
func TestLocateRealDumps(t *testing.T) {
	tests := []struct {
		file    string
		threads int
		kind    Kind
		op      string
		at      string // base:line
		source  string
		thread  int // index of the thread that speaks
	}{
		{"py311-torch113-hang-r0", 1, Collective, "all_reduce", "hang.py:6", "t = torch.ones(4); dist.all_reduce(t)", 0},
		{"py311-torch113-hang-r1", 1, Elsewhere, "", "hang.py:5", "time.sleep(3600)", 0},
		{"py311-torch113-threads-r0", 2, Collective, "all_reduce", "scen.py:14", "dist.all_reduce(torch.ones(2))", 1},
		{"py311-torch113-threads-r1", 2, Elsewhere, "", "scen.py:13", "threading.Event().wait()", 1},
		{"py311-torch113-ddp-r0", 1, Backward, "backward", "scen.py:20", "m(torch.ones(2, 4)).sum().backward()", 0},
		{"py311-torch113-ddp-r1", 1, Elsewhere, "", "scen.py:18", "time.sleep(3600)", 0},
		{"py311-torch113-socket-r0", 1, Elsewhere, "", "scen.py:24", "a, b = socket.socketpair(); a.recv(1)", 0},
		{"py311-torch113-socket-r1", 1, Collective, "barrier", "scen.py:25", "dist.barrier()", 0},
		{"py311-torch113-recurse-r0", 1, Elsewhere, "", "scen.py:32", "time.sleep(3600)", 0},
		{"py311-torch113-recurse-r1", 1, Collective, "all_reduce", "scen.py:29", "dist.all_reduce(torch.ones(2)); return", 0},
		{"py311-torch113-init-r0", 1, Collective, "init_process_group", "scen.py:6", `dist.init_process_group("gloo")`, 0},
		{"py311-torch113-init-r1", 1, Collective, "init_process_group", "scen.py:6", `dist.init_process_group("gloo")`, 0},
		{"py311-torch113-init-r2", 1, Elsewhere, "", "scen.py:5", "time.sleep(3600)  # never joins the rendezvous", 0},
		{"py311-torch113-mismatch-r0", 1, Collective, "barrier", "scen.py:38", "dist.barrier()", 0},
		{"py311-torch113-mismatch-r1", 1, Collective, "all_reduce", "scen.py:40", "dist.all_reduce(torch.ones(2))", 0},
		{"py311-torch113-threadjoin-r0", 2, Collective, "all_reduce", "scen2.py:8", "dist.all_reduce(torch.ones(2))", 0},
		{"py311-torch113-threadjoin-r1", 2, Elsewhere, "", "scen2.py:7", "time.sleep(3600)", 0},
		{"py312-torch2-hang-r0", 1, Collective, "all_reduce", "hang_demo.py:30", "dist.all_reduce(x)", 0},
		{"py312-torch2-hang-r1", 1, Elsewhere, "", "hang_demo.py:24", "time.sleep(3600)", 0},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.file+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			d, rest := ParseFaulthandler(string(b))
			if rest != "" {
				t.Errorf("lines left over: %q", rest)
			}
			if d.Text != string(b) && d.Text != string(b)+"\n" {
				t.Errorf("Text is not the dump:\n%s", d.Text)
			}
			if len(d.Threads) != tt.threads {
				t.Fatalf("%d threads, want %d: %+v", len(d.Threads), tt.threads, d.Threads)
			}
			if !d.Threads[len(d.Threads)-1].Current {
				t.Errorf("the last thread is not the current one: %+v", d.Threads)
			}
			AddSource(&d, openTestSource)
			p := Locate(d)
			at := filepath.Base(p.At.File) + ":" + itoa(p.At.Line)
			if p.Kind != tt.kind || p.Op != tt.op || at != tt.at || p.At.Source != tt.source || !p.User || p.Thread != tt.thread {
				t.Errorf("place = %v %q at %s %q (user %v, thread %d), want %v %q at %s %q (thread %d)",
					p.Kind, p.Op, at, p.At.Source, p.User, p.Thread, tt.kind, tt.op, tt.at, tt.source, tt.thread)
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestRecurseTruncated: faulthandler's 100 frames, then "  ...".
func TestRecurseTruncated(t *testing.T) {
	b, _ := os.ReadFile("testdata/py311-torch113-recurse-r1.txt")
	d, _ := ParseFaulthandler(string(b))
	if th := d.Threads[0]; len(th.Frames) != 100 || !th.Truncated {
		t.Errorf("%d frames, truncated %v; want 100, truncated", len(th.Frames), th.Truncated)
	}
}

// TestParseFaulthandlerForms: the forms of faulthandler's text the real
// dumps above do not show, and other stderr lines around a dump.
func TestParseFaulthandlerForms(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		threads []Thread
		rest    string
	}{
		{name: "nothing", in: "", threads: nil},
		{name: "no dump at all", in: "loss 0.5\nTraceback (most recent call last):\n  File \"x.py\", line 3, in f\n", rest: "loss 0.5\nTraceback (most recent call last):\n  File \"x.py\", line 3, in f\n"},
		{
			name:    "user lines before and after",
			in:      "step 9\nFatal Python error: Aborted\n\nCurrent thread 0x00007f00 (most recent call first):\n  File \"a.py\", line 2 in <module>\n\nExtension modules: torch._C (total: 1)\nbye\n",
			threads: []Thread{{ID: "0x00007f00", Current: true, Frames: []Frame{{File: "a.py", Line: 2, Func: "<module>"}}}},
			rest:    "step 9\nbye\n",
		},
		{
			name: "Python 3.14: thread names, the C stack",
			in: "Fatal Python error: Aborted\n\nThread 0x00007f01 [loader] (most recent call first):\n  File \"/usr/lib/python3.14/threading.py\", line 1016 in run\n\n" +
				"Current thread 0x00007f02 [MainThread] (most recent call first):\n  File \"/w/t.py\", line 7 in step\n  File \"/w/t.py\", line 9 in <module>\n\n" +
				"Current thread's C stack trace (most recent call first):\n  Binary file \"/usr/bin/python3.14\", at _Py_DumpStack+0x31 [0x55d]\n  <truncated rest of calls>\n\nExtension modules: x (total: 1)\n",
			threads: []Thread{
				{ID: "0x00007f01", Name: "loader", Frames: []Frame{{File: "/usr/lib/python3.14/threading.py", Line: 1016, Func: "run"}}},
				{ID: "0x00007f02", Name: "MainThread", Current: true, Frames: []Frame{{File: "/w/t.py", Line: 7, Func: "step"}, {File: "/w/t.py", Line: 9, Func: "<module>"}}},
			},
		},
		{
			name:    "one thread's dump, an unknown line, no frame",
			in:      "Fatal Python error: Segmentation fault\n\nStack (most recent call first):\n  File \"???\", line ??? in ???\n\nThread 0x1 (most recent call first):\n  <no Python frame>\n",
			threads: []Thread{{Current: true, Frames: []Frame{{File: "???", Func: "???"}}}, {ID: "0x1"}},
		},
		{
			name: "a second process's dump stays in the text only",
			in: "Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n  File \"a.py\", line 1 in <module>\n\n" +
				"Fatal Python error: Aborted\n\nCurrent thread 0x2 (most recent call first):\n  File \"b.py\", line 1 in <module>\n",
			threads: []Thread{{ID: "0x1", Current: true, Frames: []Frame{{File: "a.py", Line: 1, Func: "<module>"}}}},
		},
		{
			// The signal came as the worker exited on an error of its own
			// (a peer gone): its traceback is its output, the dump is not.
			name: "during a garbage collection at exit",
			in: "RuntimeError: Connection closed by peer\nFatal Python error: Aborted\n\nGarbage-collecting\n  <no Python frame>\n\n" +
				"Extension modules: torch._C (total: 1)\n",
			threads: nil,
			rest:    "RuntimeError: Connection closed by peer\n",
		},
		{
			name:    "a quote in a file name",
			in:      "Current thread 0x1 (most recent call first):\n  File \"/w/it\"s.py\", line 4 in f\n",
			threads: []Thread{{ID: "0x1", Current: true, Frames: []Frame{{File: "/w/it\"s.py", Line: 4, Func: "f"}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, rest := ParseFaulthandler(tt.in)
			if got, want := js(d.Threads), js(tt.threads); got != want {
				t.Errorf("threads\n got %s\nwant %s", got, want)
			}
			if rest != tt.rest {
				t.Errorf("rest = %q, want %q", rest, tt.rest)
			}
			if d.Text+rest != tt.in && len(tt.rest) == 0 {
				t.Errorf("Text = %q, want the input", d.Text)
			}
		})
	}
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

type readCloser = io.ReadCloser

var errNotFound = os.ErrNotExist

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

// TestDropDir: a pooled worker's dump (as the demo's hang printed it)
// loses the pool's frames under the script's, in its frames and its
// text, and reads as a worker started by python.
func TestDropDir(t *testing.T) {
	const pool = "/tmp/gorun-agent-3324341051"
	text := `Thread 0x00007fd5005ab040 (most recent call first):
  File "/tmp/fresh/examples/testcluster/train_ddp.py", line 104 in <module>
  File "` + pool + `/warm-0.py", line 171 in _run_script
  File "` + pool + `/warm-0.py", line 249 in _become
  File "` + pool + `/warm-0.py", line 403 in <module>
`
	d, _ := ParseFaulthandler(text)
	d.DropDir(pool + "/")
	if len(d.Threads) != 1 || len(d.Threads[0].Frames) != 1 || d.Threads[0].Frames[0].Func != "<module>" ||
		!strings.HasSuffix(d.Threads[0].Frames[0].File, "train_ddp.py") {
		t.Errorf("frames %+v, want the script's <module> alone", d.Threads)
	}
	want := "Thread 0x00007fd5005ab040 (most recent call first):\n  File \"/tmp/fresh/examples/testcluster/train_ddp.py\", line 104 in <module>\n"
	if d.Text != want {
		t.Errorf("text %q, want %q", d.Text, want)
	}
	if p := Locate(d); p.At.Line != 104 {
		t.Errorf("placed at %+v, want the script's line 104", p)
	}
}
