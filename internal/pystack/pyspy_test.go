package pystack

import (
	"strings"
	"testing"
)

// pySpyDump is `py-spy dump --json --native` of a rank waiting in
// all_reduce on NCCL, written by hand in the shape py-spy 0.4's serde
// gives its StackTrace (no py-spy on the build machine): a loader thread
// first, the main thread last, as py-spy lists them.
const pySpyDump = `[
  {"pid": 41, "thread_id": 139700000000000, "thread_name": "loader", "os_thread_id": 52,
   "active": false, "owns_gil": false, "process_info": null,
   "frames": [
     {"name": "wait", "filename": "/usr/lib/python3.11/threading.py", "module": null, "short_filename": "threading.py", "line": 320, "locals": null, "is_entry": true, "is_shim_entry": false}
   ]},
  {"pid": 41, "thread_id": 139700000000001, "thread_name": "MainThread", "os_thread_id": 41,
   "active": true, "owns_gil": false, "process_info": null,
   "frames": [
     {"name": "ncclGroupEnd", "filename": "libnccl.so.2", "module": "/usr/lib/libnccl.so.2", "short_filename": null, "line": 0, "locals": null, "is_entry": false, "is_shim_entry": false},
     {"name": "all_reduce", "filename": "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", "module": null, "short_filename": "torch/distributed/distributed_c10d.py", "line": 2501, "locals": null, "is_entry": true, "is_shim_entry": false},
     {"name": "wrapper", "filename": "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", "module": null, "short_filename": "torch/distributed/c10d_logger.py", "line": 83, "locals": null, "is_entry": true, "is_shim_entry": false},
     {"name": "<module>", "filename": "/w/train.py", "module": null, "short_filename": "train.py", "line": 30, "locals": null, "is_entry": true, "is_shim_entry": false}
   ]}
]`

func TestParsePySpy(t *testing.T) {
	d, err := ParsePySpy([]byte(pySpyDump))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Threads) != 2 || d.Threads[1].Name != "MainThread" || d.Threads[1].ID != "41" || !d.Threads[0].Idle || d.Threads[1].Idle {
		t.Fatalf("threads = %+v", d.Threads)
	}
	if f := d.Threads[1].Frames[0]; !f.Native || f.Func != "ncclGroupEnd" {
		t.Errorf("native frame = %+v", f)
	}
	wantText := "Thread 41 (active): \"MainThread\"\n" +
		"    ncclGroupEnd (libnccl.so.2)\n" +
		"    all_reduce (torch/distributed/distributed_c10d.py:2501)\n" +
		"    wrapper (torch/distributed/c10d_logger.py:83)\n" +
		"    <module> (train.py:30)\n" +
		"Thread 52 (idle): \"loader\"\n" +
		"    wait (threading.py:320)\n"
	if d.Text != wantText {
		t.Errorf("text\n%s\nwant\n%s", d.Text, wantText)
	}
	p := Locate(d)
	if p.Kind != Collective || p.Op != "all_reduce" || p.At.File != "/w/train.py" || p.At.Line != 30 || p.Thread != 1 {
		t.Errorf("place = %+v", p)
	}
	if _, err := ParsePySpy([]byte("Error: Permission Denied")); err == nil {
		t.Error("py-spy's error text read as a dump")
	}
}

// TestLocateRules: the rules of Locate on small dumps.
func TestLocateRules(t *testing.T) {
	user := func(line int) Frame { return Frame{File: "/w/train.py", Line: line, Func: "step"} }
	lib := func(file, fn string) Frame { return Frame{File: file, Line: 1, Func: fn} }
	site := "/venv/lib/python3.12/site-packages/"
	tests := []struct {
		name   string
		d      Dump
		kind   Kind
		op     string
		line   int
		user   bool
		thread int
	}{
		{name: "no threads", d: Dump{Tool: ToolFaulthandler}, kind: NoFrames, thread: -1},
		{name: "threads without frames", d: Dump{Tool: ToolFaulthandler, Threads: []Thread{{ID: "0x1"}}}, kind: NoFrames, thread: -1},
		{
			name: "DDP forward, through torch's module call",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{{Frames: []Frame{
				lib(site+"torch/nn/parallel/distributed.py", "_sync_buffers"),
				lib(site+"torch/nn/parallel/distributed.py", "forward"),
				lib(site+"torch/nn/modules/module.py", "_call_impl"), user(40)}}}},
			kind: Collective, op: "DistributedDataParallel.forward", line: 40, user: true,
		},
		{
			name: "FSDP, outside distributed_c10d.py",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{{Frames: []Frame{
				lib(site+"torch/distributed/fsdp/_runtime_utils.py", "_pre_forward"), user(41)}}}},
			kind: Collective, op: "_runtime_utils._pre_forward", line: 41, user: true,
		},
		{
			name: "a data loader: a library, then user code",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{{Frames: []Frame{
				lib("/usr/lib/python3.12/selectors.py", "select"),
				lib(site+"torch/utils/data/dataloader.py", "__next__"), user(12)}}}},
			kind: Elsewhere, line: 12, user: true,
		},
		{
			name: "a collective behind user code is not the place",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{{Frames: []Frame{
				user(7), lib(site+"torch/distributed/elastic/multiprocessing/errors/__init__.py", "wrapper")}}}},
			kind: Elsewhere, line: 7, user: true,
		},
		{
			name: "no user frame: the innermost frame",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{{Frames: []Frame{
				lib(site+"tqdm/std.py", "__iter__"), lib("<frozen runpy>", "_run_code")}}}},
			kind: Elsewhere, line: 1,
		},
		{
			name: "a torch checkout is torch, not user code",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{{Frames: []Frame{
				lib("/home/u/pytorch/torch/distributed/distributed_c10d.py", "barrier"), user(3)}}}},
			kind: Collective, op: "barrier", line: 3, user: true,
		},
		{
			name: "py-spy: the thread named MainThread speaks, wherever it is listed",
			d: Dump{Tool: ToolPySpy, Threads: []Thread{
				{Name: "MainThread", Frames: []Frame{user(5)}},
				{Name: "pin_memory", Frames: []Frame{lib(site+"torch/distributed/distributed_c10d.py", "barrier"), user(9)}}}},
			kind: Elsewhere, line: 5, user: true, thread: 0,
		},
		{
			name: "main joins a thread that is in no collective: the first with user code",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{
				{Frames: []Frame{lib("/usr/lib/python3.11/threading.py", "wait")}},
				{Frames: []Frame{user(8)}},
				{Frames: []Frame{lib("/usr/lib/python3.11/threading.py", "_wait_for_tstate_lock"), lib("/usr/lib/python3.11/threading.py", "join"), user(11)}}}},
			kind: Elsewhere, line: 8, user: true, thread: 1,
		},
		{
			name: "main joins, no other thread has a frame of user code: main",
			d: Dump{Tool: ToolFaulthandler, Threads: []Thread{
				{Frames: []Frame{lib("/usr/lib/python3.11/threading.py", "wait")}},
				{Frames: []Frame{lib("/usr/lib/python3.11/threading.py", "join"), user(11)}}}},
			kind: Elsewhere, line: 11, user: true, thread: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Locate(tt.d)
			if p.Kind != tt.kind || p.Op != tt.op || p.At.Line != tt.line || p.User != tt.user || p.Thread != tt.thread {
				t.Errorf("place = %+v, want %v %q line %d user %v thread %d", p, tt.kind, tt.op, tt.line, tt.user, tt.thread)
			}
		})
	}
}

// TestAddSource: lines read once per file, cut and cleaned; names that
// are not files, native frames and unreadable files are left alone.
func TestAddSource(t *testing.T) {
	files := map[string]string{
		"/w/a.py": "import x\n    spaced = 1   \n" + strings.Repeat("é", 150) + "\nbad \xff byte\n",
	}
	opened := map[string]int{}
	open := func(name string) (readCloser, error) {
		opened[name]++
		s, ok := files[name]
		if !ok {
			return nil, errNotFound
		}
		return nopCloser{strings.NewReader(s)}, nil
	}
	d := Dump{Threads: []Thread{{Frames: []Frame{
		{File: "/w/a.py", Line: 2}, {File: "/w/a.py", Line: 3}, {File: "/w/a.py", Line: 4}, {File: "/w/a.py", Line: 9},
		{File: "<frozen runpy>", Line: 88}, {File: "libnccl.so.2", Native: true}, {File: "/w/gone.py", Line: 1},
	}}}}
	AddSource(&d, open)
	got := []string{}
	for _, f := range d.Threads[0].Frames {
		got = append(got, f.Source)
	}
	long := strings.Repeat("é", 100) + "…"
	want := []string{"spaced = 1", long, "bad \uFFFD byte", "", "", "", ""}
	if js(got) != js(want) {
		t.Errorf("sources\n got %q\nwant %q", got, want)
	}
	if opened["/w/a.py"] != 1 || opened["<frozen runpy>"] != 0 || opened["libnccl.so.2"] != 0 {
		t.Errorf("opened = %v", opened)
	}
}

// TestFit: a dump too large for one relay frame loses its text's tail,
// then every thread but the one that speaks, then outer frames.
func TestFit(t *testing.T) {
	many := func(n int) []Frame {
		fs := make([]Frame, n)
		for i := range fs {
			fs[i] = Frame{File: "/w/" + strings.Repeat("d", 60) + ".py", Line: i + 1, Func: "f"}
		}
		return fs
	}
	d := Dump{Tool: ToolFaulthandler, Text: strings.Repeat("line of text\n", 1000),
		Threads: []Thread{{Frames: many(100)}, {Frames: many(100)}}}
	if d.Fit(1 << 20) {
		t.Error("a small dump was changed")
	}
	for _, limit := range []int{12000, 4000} {
		c := d
		c.Threads = append([]Thread(nil), d.Threads...)
		if !c.Fit(limit) || len(js(c)) > limit || !c.Trimmed || len(c.Threads) != 1 {
			t.Errorf("limit %d: %d bytes, trimmed %v, %d threads", limit, len(js(c)), c.Trimmed, len(c.Threads))
		}
		if !strings.HasSuffix(c.Text, "[gorun: cut here]\n") && c.Text != "" {
			t.Errorf("limit %d: text not marked as cut: %q", limit, c.Text[max(0, len(c.Text)-40):])
		}
	}
}
