package rank

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// interpreter is the Python torchrun runs workers with: $PYTHON_EXEC, else
// torchrun's own sys.executable, which Python derives from its argv[0] (a
// virtualenv's bin/python stays that path; the /proc exe link would
// resolve it to the base interpreter and lose the virtualenv).
func interpreter(getenv func(string) string, parent int) string {
	if py := getenv("PYTHON_EXEC"); py != "" {
		return py
	}
	proc := filepath.Join("/proc", strconv.Itoa(parent))
	if b, err := os.ReadFile(filepath.Join(proc, "cmdline")); err == nil {
		argv0, _, _ := bytes.Cut(b, []byte{0})
		a := string(argv0)
		if isPython(a) {
			if strings.Contains(a, "/") && !filepath.IsAbs(a) {
				if cwd, err := os.Readlink(filepath.Join(proc, "cwd")); err == nil {
					a = filepath.Join(cwd, a)
				}
			}
			return a
		}
	}
	if exe, err := os.Readlink(filepath.Join(proc, "exe")); err == nil && isPython(exe) {
		return exe
	}
	return "python3"
}

func isPython(path string) bool {
	b := filepath.Base(path)
	return strings.HasPrefix(b, "python") || strings.HasPrefix(b, "pypy")
}
