package preflight

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// torchLocateScript prints torch's package directory, then the names of
// nvidia_nccl* distributions beside it (the NCCL wheel torch depends on).
// importlib.util.find_spec locates a package without executing its
// __init__, so this never imports torch, never initialises CUDA, and takes
// milliseconds where `import torch` takes seconds.
const torchLocateScript = `import importlib.util as u,os;` +
	`s=u.find_spec("torch");` +
	`d=s.submodule_search_locations[0] if s and s.submodule_search_locations else "";` +
	`print(d);` +
	`d and print("\n".join(n for n in sorted(os.listdir(os.path.dirname(d))) if n.startswith("nvidia_nccl")))`

// TorchLocateArgv is the command FindTorch runs with the given interpreter.
func TorchLocateArgv(python string) []string {
	return []string{python, "-c", torchLocateScript}
}

// TorchVersionFile is what torch/version.py, written by torch's build,
// records about a build.
type TorchVersionFile struct {
	Version    string // __version__, "2.11.0+cu130"
	CUDA       string // cuda, "13.0"; "" for CPU and ROCm builds
	HIP        string // hip, the ROCm version; "" for CUDA and CPU builds
	GitVersion string // git_version, the commit torch was built from
	Debug      bool   // debug
}

// versionAssign matches one assignment of version.py, with or without a
// type annotation: `cuda = '12.8'`, `cuda: Optional[str] = '12.8'`.
var versionAssign = lazyre.New(`^([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]*)?=\s*(.*?)\s*(?:#.*)?$`)

// ParseTorchVersionFile reads torch/version.py without running it. Values
// may be quoted strings or None, True and False; other lines are ignored.
// A file without __version__ is an error.
func ParseTorchVersionFile(src []byte) (TorchVersionFile, error) {
	var v TorchVersionFile
	seen := false
	for _, line := range strings.Split(string(src), "\n") {
		m := versionAssign().FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		val, isString := pyLiteral(m[2])
		switch m[1] {
		case "__version__":
			if isString && val != "" {
				v.Version, seen = val, true
			}
		case "cuda":
			v.CUDA = val
		case "hip":
			v.HIP = val
		case "git_version":
			v.GitVersion = val
		case "debug":
			v.Debug = val == "True"
		}
	}
	if !seen {
		return v, fmt.Errorf("torch version file: no __version__ string")
	}
	return v, nil
}

// pyLiteral decodes a Python string literal ('x', "x") or returns None as
// "" and True/False as themselves; isString reports a string literal.
func pyLiteral(s string) (val string, isString bool) {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1], true
	}
	if s == "None" {
		return "", false
	}
	return s, false
}

// ncclDistInfo matches the NCCL wheel's metadata directory,
// nvidia_nccl_cu12-2.27.3.dist-info, and captures the version.
var ncclDistInfo = lazyre.New(`^nvidia_nccl_cu[0-9]+-([0-9]+(?:\.[0-9]+)+)[^/]*\.dist-info$`)

// FindTorch locates the torch package of the given interpreter (the one
// torchrun uses; see TorchrunPython) without importing torch: run executes
// TorchLocateArgv(python) and readFile reads <dir>/version.py. The NCCL
// version is taken from the nvidia_nccl_cu* wheel installed beside torch,
// when there is one (pip wheels; builds with NCCL linked in have none).
// Failures are reported in TorchFacts.Err, never as a panic or an error
// return, so collection goes on.
func FindTorch(ctx context.Context, python string, run func(ctx context.Context, argv []string) ([]byte, error), readFile func(string) ([]byte, error)) TorchFacts {
	tf := TorchFacts{Python: python}
	out, err := run(ctx, TorchLocateArgv(python))
	if err != nil {
		tf.Err = fmt.Sprintf("locate torch with %s: %v", python, err)
		if msg := lastLine(out); msg != "" {
			tf.Err += ": " + msg
		}
		return tf
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := strings.TrimSpace(lines[0])
	if dir == "" {
		tf.Err = fmt.Sprintf("torch is not installed for %s", python)
		return tf
	}
	return torchIn(tf, dir, lines[1:], readFile)
}

// torchIn completes tf with the torch package found in dir: its
// version.py, and the NCCL wheel's version where beside (names in dir's
// parent folder) has an nvidia_nccl_cu* dist-info.
func torchIn(tf TorchFacts, dir string, beside []string, readFile func(string) ([]byte, error)) TorchFacts {
	tf.Dir = dir
	file := path.Join(dir, "version.py")
	src, err := readFile(file)
	if err != nil {
		tf.Err = fmt.Sprintf("read %s: %v", file, err)
		return tf
	}
	v, err := ParseTorchVersionFile(src)
	if err != nil {
		tf.Err = fmt.Sprintf("%s: %v", file, err)
		return tf
	}
	tf.Found, tf.Version, tf.CUDA = true, v.Version, v.CUDA
	for _, l := range beside {
		if m := ncclDistInfo().FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			tf.NCCL = m[1]
		}
	}
	return tf
}

// TorchAt is where a check of the run found torch on a node: the
// interpreter torchrun uses there, and the torch package's folder.
type TorchAt struct {
	Python string `json:"python"`
	Dir    string `json:"dir"`
}

// ReadTorchAt is FindTorch for a recheck during the run, where an earlier
// check found torch at at: when torchrun's interpreter is still
// at.Python and is there (stat), it reads at.Dir's version.py and the
// NCCL wheel beside it (listDir: the names in a folder) without starting
// the interpreter, which is most of a node's recheck (25 ms of CPU
// against 56–71 with it, on a 2-core machine). A torch deleted, unmounted or replaced in
// place since is found out as FindTorch would; one installed elsewhere on
// the interpreter's path is not, until the next launch. Otherwise
// (another interpreter now) it is FindTorch.
func ReadTorchAt(ctx context.Context, python string, at TorchAt, stat func(string) error, run func(ctx context.Context, argv []string) ([]byte, error),
	readFile func(string) ([]byte, error), listDir func(string) ([]string, error)) TorchFacts {
	if python != at.Python || at.Dir == "" {
		return FindTorch(ctx, python, run, readFile)
	}
	tf := TorchFacts{Python: python}
	if err := stat(python); err != nil {
		tf.Err = fmt.Sprintf("locate torch with %s: %v", python, err)
		return tf
	}
	beside, _ := listDir(path.Dir(at.Dir)) // no folder to list: version.py's read says so
	return torchIn(tf, at.Dir, beside, readFile)
}

// lastLine is the last non-empty line of b (a Python traceback's message).
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// TorchrunPython reads the interpreter a torchrun script starts with: the
// path in its #! line ("#!/usr/bin/python3"), the program after
// /usr/bin/env ("#!/usr/bin/env python3" gives "python3"), or, for pip's
// launcher for paths too long for #!, the interpreter on its
// `”'exec' /long/path/python "$0" "$@"` line. "" when none can be read.
func TorchrunPython(torchrunPath string, readFile func(string) ([]byte, error)) string {
	src, err := readFile(torchrunPath)
	if err != nil {
		return ""
	}
	lines := bytes.SplitN(src, []byte("\n"), 3)
	first := strings.TrimSpace(string(lines[0]))
	rest, ok := strings.CutPrefix(first, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	if path.Base(fields[0]) == "env" {
		for _, f := range fields[1:] {
			if strings.HasPrefix(f, "-") || strings.Contains(f, "=") {
				continue // env options (-S) and VAR=value assignments
			}
			return f
		}
		return ""
	}
	if (fields[0] == "/bin/sh" || fields[0] == "/bin/bash") && len(lines) > 1 {
		second := strings.TrimSpace(string(lines[1]))
		exec, ok := strings.CutPrefix(second, "'''exec' ")
		if !ok {
			return ""
		}
		if quoted, ok := strings.CutPrefix(exec, `"`); ok {
			p, _, _ := strings.Cut(quoted, `"`) // a quoted path may hold spaces
			return p
		}
		if f := strings.Fields(exec); len(f) > 0 {
			return f[0]
		}
		return ""
	}
	return fields[0]
}
