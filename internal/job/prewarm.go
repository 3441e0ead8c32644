package job

import (
	"regexp"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/inputfile"
)

// autoPrewarm applies --prewarm auto to cl: the worker pool
// pre-imports torch for a script that imports it, and stays out of the
// way of one that does not (a small CPU job, a shell-like script), where
// it would cost each rank an interpreter's memory and an import for
// nothing. Only a script the head can read is judged; a module (-m), or a
// script only the nodes have, keeps the pool. It returns cl as the launch
// runs it; Gorun.PrewarmSkipped says why for the plan's note.
func autoPrewarm(cl cmdline.CommandLine) cmdline.CommandLine {
	g := cl.Gorun
	if !g.PrewarmAuto || len(g.Prewarm) == 0 || cl.Torchrun.Module || cl.Torchrun.TrainingScript == "" {
		return cl
	}
	src, err := inputfile.Read(cl.Torchrun.TrainingScript, maxScriptBytes)
	if err != nil || importsAny(src, g.Prewarm) {
		return cl
	}
	g.PrewarmSkipped = "the script imports none of " + strings.Join(g.Prewarm, ", ")
	g.Prewarm = nil
	cl.Gorun = g
	return cl
}

// importsAny reports whether Python source src has an import statement of
// one of modules' top-level packages at the start of a line (indented or
// not: an import inside main() counts): `import torch`, `import os,
// torch.nn as nn`, `from torch import nn`. A mention in a string or a
// comment line does not count; one in a multi-line string that looks like
// an import does, which errs towards the pool.
func importsAny(src []byte, modules []string) bool {
	var tops []string
	for _, m := range modules {
		top, _, _ := strings.Cut(m, ".")
		tops = append(tops, regexp.QuoteMeta(top))
	}
	names := strings.Join(tops, "|")
	re := regexp.MustCompile(`(?m)^[ \t]*(?:from[ \t]+(?:` + names + `)\b|import[ \t]+(?:[^#\n;]*[ \t,])?(?:` + names + `)\b)`)
	return re.Match(src)
}
