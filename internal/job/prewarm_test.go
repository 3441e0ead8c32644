package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
)

func TestImportsAny(t *testing.T) {
	for _, tt := range []struct {
		src  string
		want bool
	}{
		{"import torch\n", true},
		{"import os, torch.nn as nn\n", true},
		{"from torch import nn\n", true},
		{"from torch.utils.data import DataLoader\n", true},
		{"def main():\n    import torch\n", true},
		{"import os\nimport numpy as np\n", false},
		{"import torchvision\n", false},
		{"import mytorch\n", false},
		{"# import torch\nprint('no')\n", false},
		{"print('import torch')\n", false},
		{"from mylib import torch_utils\n", false},
		{"", false},
	} {
		if got := importsAny([]byte(tt.src), []string{"torch"}); got != tt.want {
			t.Errorf("importsAny(%q) = %v, want %v", tt.src, got, tt.want)
		}
	}
	if !importsAny([]byte("import numpy.linalg\n"), []string{"torch", "numpy.linalg"}) {
		t.Error("a dotted module is not found by its package")
	}
}

func TestAutoPrewarm(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withTorch := write("train.py", "import torch\n")
	without := write("tiny.py", "print('hello')\n")
	parse := func(args ...string) cmdline.CommandLine {
		t.Helper()
		cl, err := cmdline.Parse(args, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	if cl := autoPrewarm(parse("--prewarm", "auto", withTorch)); strings.Join(cl.Gorun.Prewarm, ",") != "torch" || cl.Gorun.PrewarmSkipped != "" {
		t.Errorf("a script importing torch: pool %v (skipped %q), want torch", cl.Gorun.Prewarm, cl.Gorun.PrewarmSkipped)
	}
	cl := autoPrewarm(parse("--prewarm", "auto", without))
	if len(cl.Gorun.Prewarm) != 0 || !strings.Contains(cl.Gorun.PrewarmSkipped, "imports none of torch") {
		t.Errorf("a script without torch: pool %v (skipped %q), want none, said", cl.Gorun.Prewarm, cl.Gorun.PrewarmSkipped)
	}
	if cl := autoPrewarm(parse("--prewarm", "torch", without)); strings.Join(cl.Gorun.Prewarm, ",") != "torch" {
		t.Errorf("--prewarm torch given: pool %v, want torch", cl.Gorun.Prewarm)
	}
	if cl := autoPrewarm(parse(withTorch)); strings.Join(cl.Gorun.Prewarm, ",") != "torch" || !cl.Gorun.PrewarmAuto {
		t.Errorf("the default (auto): pool %v (auto %v), want torch, auto", cl.Gorun.Prewarm, cl.Gorun.PrewarmAuto)
	}
	if cl := autoPrewarm(parse("--prewarm", "off", withTorch)); len(cl.Gorun.Prewarm) != 0 {
		t.Errorf("--prewarm off: pool %v, want none", cl.Gorun.Prewarm)
	}
	if cl := autoPrewarm(parse("--prewarm", "auto", filepath.Join(dir, "elsewhere.py"))); strings.Join(cl.Gorun.Prewarm, ",") != "torch" {
		t.Errorf("a script the head cannot read: pool %v, want torch (the nodes may have it)", cl.Gorun.Prewarm)
	}
	if cl := autoPrewarm(parse("--prewarm", "auto", "-m", "mypkg.train")); strings.Join(cl.Gorun.Prewarm, ",") != "torch" {
		t.Errorf("-m: pool %v, want torch", cl.Gorun.Prewarm)
	}
	if cl := autoPrewarm(parse("--prewarm", "auto", "--no-python", "/bin/true")); len(cl.Gorun.Prewarm) != 0 {
		t.Errorf("--no-python: pool %v, want none", cl.Gorun.Prewarm)
	}
}
