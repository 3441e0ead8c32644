package node

import (
	"os"
	"os/exec"
	"strings"

	"github.com/gorun/gorun/preflight"
)

// torchrunPython is the interpreter torchrun runs under (its #! line),
// found on the PATH: the torchrun command's first word, else "torchrun";
// python3 when its #! line names none (a wrapper), and then guessed is
// true.
func torchrunPython(torchrun string) (python string, guessed bool) {
	prog := "torchrun"
	if f := strings.Fields(torchrun); len(f) > 0 {
		prog = f[0]
	}
	if p, err := exec.LookPath(prog); err == nil {
		prog = p
	}
	py := preflight.TorchrunPython(prog, os.ReadFile)
	if py == "" {
		py, guessed = "python3", true
	}
	if p, err := exec.LookPath(py); err == nil {
		py = p
	}
	return py, guessed
}

// torchrunMissing says why the torchrun command (its first word, else
// "torchrun") cannot be run here; "" when it can.
func torchrunMissing(torchrun string) string {
	prog := "torchrun"
	if f := strings.Fields(torchrun); len(f) > 0 {
		prog = f[0]
	}
	if _, err := exec.LookPath(prog); err != nil {
		return err.Error()
	}
	return ""
}
