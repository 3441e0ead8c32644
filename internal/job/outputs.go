package job

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/userr"
)

// outputs are the files and folders a run writes on the head, checked
// before anything starts: a path that could only fail after a whole run,
// or that would overwrite one of the run's own inputs, is refused.
type outputs struct {
	flightRecorder string // a folder, made when the job starts
}

// output is one path the run writes.
type output struct {
	flag, path string
	dir        bool // a folder, not a file
}

// checkOutputs refuses, with the flag and a fix: a file output that is a
// directory, a device or anything but a regular file; one in a folder that
// is missing or cannot be written; a folder output that is a file; and any
// output that is the training script, a hostfile, an ssh file or the gorun
// binary, or that another output names too. Nothing is created here.
func checkOutputs(cl cmdline.CommandLine, self string) (outputs, error) {
	o := cl.Gorun
	outs := []output{{"--report", o.Report, false}, {"--summary", o.Summary, false}, {"--telemetry", o.Telemetry, false},
		{"--flight-recorder", o.FlightRecorder, true}}
	inputs := []output{{"training script", cl.Torchrun.TrainingScript, false}, {"--hostfile", o.Hostfile, false},
		{"--ssh-config", o.SSHConfig, false}, {"--known-hosts", o.KnownHosts, false}, {"--ssh-identity", o.SSHIdentity, false},
		{"the gorun binary", self, false}}
	if cl.Torchrun.Module || cl.Torchrun.NoPython {
		inputs = inputs[1:]
	}
	for i, out := range outs {
		if out.path == "" {
			continue
		}
		if err := checkOutput(out); err != nil {
			return outputs{}, err
		}
		for _, other := range append(inputs, outs[:i]...) {
			if other.path != "" && samePath(out.path, other.path) {
				return outputs{}, &userr.InputError{Where: out.flag + " " + out.path, Problem: "is also " + other.flag + ", which it would overwrite",
					Fix: "give " + out.flag + " a path of its own"}
			}
		}
	}
	return outputs{flightRecorder: o.FlightRecorder}, nil
}

func checkOutput(out output) error {
	bad := func(problem, fix string) error {
		return &userr.InputError{Where: out.flag + " " + out.path, Problem: problem, Fix: fix}
	}
	st, err := os.Stat(out.path)
	switch {
	case err == nil && out.dir && !st.IsDir():
		return bad("is a file, and the flight-recorder dumps go in a folder", "give a folder (gorun makes it if it is missing)")
	case err == nil && out.dir:
		return writableDir(out.path, bad)
	case err == nil && st.IsDir():
		return bad("is a directory", "give a file name, for example "+filepath.Join(out.path, "gorun"+defaultExt(out.flag)))
	case err == nil && !st.Mode().IsRegular():
		return bad("is not a regular file ("+st.Mode().Type().String()+")", "give the path of a regular file")
	case err == nil:
		return writableDir(filepath.Dir(out.path), bad)
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return bad(err.Error(), "give a path gorun can write")
	case out.dir:
		return nil // made, parents and all, when the job starts
	}
	parent := filepath.Dir(out.path)
	pst, err := os.Stat(parent)
	switch {
	case err != nil:
		return bad(fmt.Sprintf("its folder %s does not exist", parent), "make the folder first, or give a path in one that exists")
	case !pst.IsDir():
		return bad(fmt.Sprintf("%s is not a folder", parent), "give a path in a folder")
	}
	return writableDir(parent, bad)
}

// writableDir proves dir takes new files by making one and removing it:
// permission bits say nothing of a read-only mount, and root ignores them.
func writableDir(dir string, bad func(problem, fix string) error) error {
	f, err := os.CreateTemp(dir, ".gorun-probe-*")
	if err != nil {
		return bad(fmt.Sprintf("cannot write in %s: %v", dir, errors.Unwrap(err)), "give a path in a folder gorun can write")
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

func defaultExt(flag string) string {
	switch flag {
	case "--report":
		return ".html"
	case "--summary":
		return ".json"
	}
	return ".jsonl"
}

// samePath reports whether a and b name one file: the same file where
// both exist, else the same absolute path.
func samePath(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// create makes the folders the run writes in.
func (o outputs) create() error {
	if o.flightRecorder == "" {
		return nil
	}
	if err := os.MkdirAll(o.flightRecorder, 0o755); err != nil {
		return &userr.InputError{Where: "--flight-recorder " + o.flightRecorder, Problem: err.Error(), Fix: "give a folder gorun can make and write"}
	}
	return nil
}
