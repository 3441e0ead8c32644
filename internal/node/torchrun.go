package node

import (
	"os"
	"os/exec"
	"strings"

	"github.com/gorun/gorun/preflight"
)

// torchrunProgram is the torchrun command's program (its first word, else
// "torchrun") found on the PATH, and why it is not there to run ("" when
// it is; then the path is LookPath's).
func torchrunProgram(torchrun string) (prog, missing string) {
	prog = "torchrun"
	if f := strings.Fields(torchrun); len(f) > 0 {
		prog = f[0]
	}
	p, err := exec.LookPath(prog)
	if err != nil {
		return prog, err.Error()
	}
	return p, ""
}

// torchrunPython is the interpreter torchrun runs under (its #! line),
// found on the PATH: the torchrun command's first word, else "torchrun";
// python3 when its #! line names none (a wrapper), and then guessed is
// true.
func torchrunPython(torchrun string) (python string, guessed bool) {
	prog, _ := torchrunProgram(torchrun)
	py := preflight.TorchrunPython(prog, os.ReadFile)
	if py == "" {
		py, guessed = "python3", true
	}
	if p, err := exec.LookPath(py); err == nil {
		py = p
	}
	return py, guessed
}
