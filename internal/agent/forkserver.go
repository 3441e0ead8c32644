package agent

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The fork server is warm.py, embedded in gorun and written to a private
// folder of the agent's as each starts: a Python interpreter that does the job's imports ahead and
// then becomes the job's program (a standby's, standby.go) or forks the
// job's workers (the pool's, pool.go). What follows reads a job's Python
// program into what warm.py runs.

//go:embed warm.py
var warmPy string

// warmProgram is how a job's program starts warm: its interpreter and the
// arguments before the shim, and the script (or module) with the
// arguments that follow it.
type warmProgram struct {
	interp []string // interpreter and its own options
	mode   string   // "script" or "module"
	target string   // the script's path, or the module's name
	args   []string // the job's arguments after the script or module
}

// shown is the program's command line as a cold start's shows in ps.
func (w warmProgram) shown() []string {
	argv := slices.Clone(w.interp)
	if w.mode == "module" {
		argv = append(argv, "-m")
	}
	return append(append(argv, w.target), w.args...)
}

// pythonProgram tells how job's program would run under Python: a script
// whose #! line names a Python interpreter (directly or through env), or
// a Python interpreter given -m MODULE. Anything else cannot start warm,
// and the error says why.
func pythonProgram(argv []string, env []string, dir string) (warmProgram, error) {
	path, err := lookPath(argv[0], envValue(env, "PATH"), dir)
	if err != nil {
		return warmProgram{}, err
	}
	if isPython(path) {
		for i := 1; i < len(argv); i++ {
			a := argv[i]
			switch {
			case a == "-m" && i+1 < len(argv):
				return warmProgram{interp: append([]string{path}, argv[1:i]...), mode: "module", target: argv[i+1], args: argv[i+2:]}, nil
			case a == "-u" || a == "-s" || a == "-B" || a == "-O" || a == "-OO":
				continue
			}
			break
		}
		return warmProgram{}, fmt.Errorf("%s runs no -m MODULE", argv[0])
	}
	abs := path
	if !filepath.IsAbs(abs) && dir != "" {
		abs = filepath.Join(dir, abs)
	}
	shebang, err := readShebang(abs)
	if err != nil {
		return warmProgram{}, err
	}
	interp := shebang
	if filepath.Base(interp[0]) == "env" && len(interp) > 1 {
		p, err := lookPath(interp[1], envValue(env, "PATH"), dir)
		if err != nil {
			return warmProgram{}, fmt.Errorf("%s's interpreter %s: %w", argv[0], interp[1], err)
		}
		interp = append([]string{p}, interp[2:]...)
	}
	if !isPython(interp[0]) {
		return warmProgram{}, fmt.Errorf("%s is run by %s, not by Python", argv[0], interp[0])
	}
	return warmProgram{interp: interp, mode: "script", target: abs, args: argv[1:]}, nil
}

func isPython(path string) bool {
	return strings.HasPrefix(filepath.Base(path), "python")
}

// readShebang returns the interpreter and its argument from a script's #!
// line.
func readShebang(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line, err := bufio.NewReader(io.LimitReader(f, 256)).ReadString('\n')
	if !strings.HasPrefix(line, "#!") || (err != nil && !errors.Is(err, io.EOF)) {
		return nil, fmt.Errorf("%s is not a script with a #! line", path)
	}
	// Linux passes what follows the interpreter as one argument.
	fields := strings.SplitN(strings.TrimSpace(line[2:]), " ", 2)
	if fields[0] == "" {
		return nil, fmt.Errorf("%s has an empty #! line", path)
	}
	if len(fields) == 2 {
		fields[1] = strings.TrimSpace(fields[1])
	}
	return fields, nil
}

// importTimeVar reports whether the interpreter or what it imports may
// read a variable before the job is handed over: a warm interpreter whose
// environment differs from the job's in one of these cannot stand in for
// the job. A pooled worker's script that sets one before it imports the
// pool's modules starts cold (warm.py reads the same rules, sent as
// importTimeRules).
func importTimeVar(name string) bool {
	prefixes, names := importTimeRules()
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return slices.Contains(names, name)
}

// importTimeRules are importTimeVar's: the prefixes, and the whole names,
// of the variables read at import time.
func importTimeRules() (prefixes, names []string) {
	return []string{"PYTHON", "LD_", "TORCH", "PYTORCH", "CUDA", "OMP_", "MKL_", "KMP_", "OPENBLAS", "LC_", "GOMP_", "NUMEXPR_", "NUMBA_", "XLA_", "TF_"},
		[]string{"PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV", "CONDA_PREFIX"}
}
