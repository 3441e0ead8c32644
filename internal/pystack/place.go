package pystack

import (
	"path"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// Kind says where a process waits.
type Kind int

const (
	// NoFrames: the dump held no Python frame to judge.
	NoFrames Kind = iota
	// Collective: in torch.distributed (c10d, DDP, FSDP, their NCCL and
	// gloo frames with py-spy --native), before any frame of user code.
	Collective
	// Backward: in autograd's backward before any frame of user code,
	// which is where DDP and FSDP reduce gradients (from C++, so no
	// torch.distributed frame shows).
	Backward
	// Elsewhere: anywhere else, in user code or a library it called.
	Elsewhere
)

func (k Kind) String() string {
	switch k {
	case NoFrames:
		return "no frames"
	case Collective:
		return "collective"
	case Backward:
		return "backward"
	case Elsewhere:
		return "elsewhere"
	}
	return "kind(?)"
}

// Waiting reports whether a process of this kind waits for its peers.
func (k Kind) Waiting() bool { return k == Collective || k == Backward }

// Place is where a process is, as its stacks show.
type Place struct {
	Kind Kind
	// Op names the collective: the torch.distributed function the user's
	// code called ("all_reduce", "barrier", "init_process_group"),
	// "DistributedDataParallel.forward", a native NCCL or gloo function;
	// "backward" for Backward; "" otherwise.
	Op string
	// At is the innermost frame in user code (not site-packages,
	// dist-packages, the standard library or torch); the innermost frame
	// where there is none (User false).
	At   Frame
	User bool
	// Thread is the index in Dump.Threads of the thread that speaks for
	// the process; -1 with NoFrames.
	Thread int
}

// Locate says where the process of d is. The thread that speaks for it is
// the main thread (py-spy's and Python 3.14's "MainThread"; with older
// faulthandler the last listed, the oldest thread), unless the main
// thread is joining another thread: then the first other thread waiting
// in a collective, else the first with a frame in user code. Its frames
// are read from the innermost out, up to the first frame of user code: a
// torch.distributed frame on the way makes it Collective, autograd's
// backward Backward, and anything else Elsewhere.
func Locate(d Dump) Place {
	i, p := d.speaker()
	if i < 0 {
		return Place{Kind: NoFrames, Thread: -1}
	}
	p.Thread = i
	return p
}

// speaker picks the thread that speaks for the process and its place;
// -1 when no thread has a frame.
func (d Dump) speaker() (int, Place) {
	main := -1
	for i, t := range d.Threads {
		if len(t.Frames) == 0 {
			continue
		}
		if t.Name == "MainThread" {
			main = i
			break
		}
		if t.Name == "" && d.Tool == ToolFaulthandler {
			main = i // the last one listed
		}
	}
	if main < 0 {
		for i, t := range d.Threads {
			if len(t.Frames) > 0 {
				main = i // no main thread named: the first with frames
				break
			}
		}
	}
	if main < 0 {
		return -1, Place{}
	}
	mp := place(d.Threads[main].Frames)
	if !joining(d.Threads[main].Frames) {
		return main, mp
	}
	user := -1
	for i, t := range d.Threads {
		if i == main || len(t.Frames) == 0 {
			continue
		}
		p := place(t.Frames)
		if p.Kind.Waiting() {
			return i, p
		}
		if p.User && user < 0 {
			user = i
		}
	}
	if user >= 0 {
		return user, place(d.Threads[user].Frames)
	}
	return main, mp
}

// ThreadPlace is where one thread is, its frames read as Locate reads
// the speaking thread's.
func ThreadPlace(t Thread) Place { return place(t.Frames) }

// place reads one thread's frames, innermost first.
func place(frames []Frame) Place {
	p := Place{Kind: Elsewhere}
	if len(frames) == 0 {
		return Place{Kind: NoFrames}
	}
	p.At = frames[0]
	c10d, coll := -1, -1 // outermost frames on the way: in distributed_c10d.py, in any collective
	backward := false
	for i, f := range frames {
		if !library(f) {
			p.At, p.User = f, true
			break
		}
		switch {
		case collective(f):
			coll = i
			if strings.HasSuffix(f.File, "/distributed_c10d.py") {
				c10d = i
			}
		case autograd(f):
			backward = true
		}
	}
	switch {
	case c10d >= 0:
		p.Kind, p.Op = Collective, frames[c10d].Func
	case coll >= 0:
		p.Kind, p.Op = Collective, opName(frames[coll])
	case backward:
		p.Kind, p.Op = Backward, "backward"
	}
	return p
}

// joining reports whether a thread waits for another to end
// (threading.Thread.join), having handed its work to it.
func joining(frames []Frame) bool {
	for _, f := range frames {
		if !stdlib(f.File) {
			return false
		}
		if path.Base(f.File) == "threading.py" && f.Func == "join" {
			return true
		}
	}
	return false
}

// opName names a collective frame outside distributed_c10d.py.
func opName(f Frame) string {
	switch {
	case f.Native:
		return f.Func
	case strings.HasSuffix(f.File, "/torch/nn/parallel/distributed.py"):
		return "DistributedDataParallel." + f.Func
	}
	return strings.TrimSuffix(path.Base(f.File), ".py") + "." + f.Func
}

// library reports whether a frame is outside the user's code: a package
// installed under site-packages or dist-packages, the standard library,
// frozen or generated code, native code, or torch's own collective and
// autograd files wherever torch lives (a source checkout too).
func library(f Frame) bool {
	return f.Native || strings.HasPrefix(f.File, "<") ||
		strings.Contains(f.File, "/site-packages/") || strings.Contains(f.File, "/dist-packages/") ||
		stdlib(f.File) || collective(f) || autograd(f)
}

// stdlibDir matches the standard library's folder: /usr/lib/python3.11/,
// a virtualenv's or pyenv's lib/python3.12/, a free-threaded python3.13t/.
var stdlibDir = lazyre.New(`(^|/)lib/python\d+(\.\d+)?t?/`)

func stdlib(file string) bool {
	return stdlibDir().MatchString(file) && !strings.Contains(file, "/site-packages/") ||
		strings.HasPrefix(file, "<frozen ")
}

// collective reports whether a frame is torch.distributed's (c10d, DDP,
// FSDP, the rendezvous of init_process_group), DeepSpeed's comm layer,
// or native NCCL, gloo or c10d code.
func collective(f Frame) bool {
	if f.Native {
		fn := strings.ToLower(f.Func)
		return strings.Contains(fn, "nccl") || strings.Contains(fn, "gloo::") || strings.Contains(fn, "c10d::")
	}
	return strings.Contains(f.File, "/torch/distributed/") ||
		strings.HasSuffix(f.File, "/torch/nn/parallel/distributed.py") ||
		strings.Contains(f.File, "/deepspeed/comm/")
}

// autograd reports whether a frame is autograd's backward.
func autograd(f Frame) bool {
	return strings.Contains(f.File, "/torch/autograd/") ||
		strings.HasSuffix(f.File, "/torch/_tensor.py") && f.Func == "backward"
}
