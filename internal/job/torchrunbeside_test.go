package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
)

// TestTorchrunBesideSelf: gorun installed in an environment's bin/ (a
// wheel) runs that environment's torchrun on this machine, ahead of
// PATH's, and says so; never for a launch on other nodes, nor where
// --torchrun names a command.
func TestTorchrunBesideSelf(t *testing.T) {
	env := t.TempDir()
	self, torchrun := filepath.Join(env, "gorun"), filepath.Join(env, "torchrun")
	for _, p := range []string{self, torchrun} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(t.TempDir(), "torchrun")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := func(p string) func(string) (string, error) {
		return func(string) (string, error) { return p, nil }
	}
	none := func(string) string { return "" }
	cl := func(args ...string) cmdline.CommandLine {
		c, err := cmdline.Parse(append(args, "train.py"), none)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	got, note := TorchrunBesideSelf(cl(), self, none, onPath(other))
	if got.Gorun.Torchrun != torchrun || !strings.Contains(note, other) {
		t.Errorf("beside gorun, another on PATH: %q, note %q", got.Gorun.Torchrun, note)
	}
	if got, note = TorchrunBesideSelf(cl(), self, none, onPath(torchrun)); got.Gorun.Torchrun != torchrun || note != "" {
		t.Errorf("the same on PATH: %q, note %q", got.Gorun.Torchrun, note)
	}
	for name, c := range map[string]cmdline.CommandLine{
		"--hosts":    cl("--hosts", "a:1,b:1"),
		"--torchrun": cl("--torchrun", "python3 -m torch.distributed.run"),
	} {
		if got, _ := TorchrunBesideSelf(c, self, none, onPath(other)); got.Gorun.Torchrun != c.Gorun.Torchrun {
			t.Errorf("%s: torchrun became %q", name, got.Gorun.Torchrun)
		}
	}
	if got, _ := TorchrunBesideSelf(cl(), filepath.Join(t.TempDir(), "gorun"), none, onPath(other)); got.Gorun.Torchrun != "torchrun" {
		t.Errorf("no torchrun beside gorun: %q", got.Gorun.Torchrun)
	}
}
