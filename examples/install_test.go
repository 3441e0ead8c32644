package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWheelInstall: gorun's wheel (scripts/wheel.py, around this test's
// build) installs with pip --no-index into a fresh venv that sees Debian's
// torch, puts the gorun binary itself in the venv's bin/, and that gorun:
// says its version; on this machine, not activated, runs the torchrun
// installed beside it ahead of PATH's, and says so; and launches a real
// 2-node DDP run on the netns cluster.
func TestWheelInstall(t *testing.T) {
	c := needCluster(t, 2)
	need(t, exec.Command("python3", "-m", "venv", "--help").Run() == nil, "python3 -m venv is missing (Debian: python3-venv)")
	dir := t.TempDir()
	wheel := filepath.Join(dir, "dist")
	if err := os.Mkdir(wheel, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("python3", absPath(t, "../scripts/wheel.py"), gorunBin, "0.9.0", "amd64", "1764979200", wheel).CombinedOutput(); err != nil {
		t.Fatalf("wheel.py: %v\n%s", err, out)
	}
	whl, _ := filepath.Glob(filepath.Join(wheel, "gorun_launcher-0.9.0-py3-none-manylinux_2_28_x86_64.whl"))
	if len(whl) != 1 {
		t.Fatalf("no wheel in %s", wheel)
	}
	venv := filepath.Join(dir, "venv")
	for _, argv := range [][]string{
		{"python3", "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-index", whl[0]},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	gorun := filepath.Join(venv, "bin", "gorun")
	if fi, err := os.Stat(gorun); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("no executable gorun in the venv's bin: %v", err)
	}
	if out, err := exec.Command(gorun, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "gorun 0.9.0") {
		t.Fatalf("the installed gorun version: %v\n%s", err, out)
	}
	// The environment's torchrun (here Debian's torch behind the shim).
	shimBytes, err := os.ReadFile(shim(t))
	if err != nil {
		t.Fatal(err)
	}
	envTorchrun := filepath.Join(venv, "bin", "torchrun")
	if err := os.WriteFile(envTorchrun, shimBytes, 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir() // a torchrun on PATH that must not be run
	if err := os.WriteFile(filepath.Join(other, "torchrun"), []byte("#!/bin/sh\necho wrong torchrun; exit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mark := marker(t)
	r := startCmd(t, exec.Command(gorun, "--nproc-per-node", "2", script(t), "--tag", mark),
		[]string{"GORUN_MARK=" + mark, "STEPS=3", "PATH=" + other + ":/usr/bin:/bin"})
	if code := r.wait(t, 3*time.Minute); code != 0 || !strings.Contains(r.output(), "torchrun: "+envTorchrun+", beside this gorun") ||
		!strings.Contains(r.output(), "params-in-sync OK") {
		t.Fatalf("local launch from the venv: exit %d, want 0 with the environment's torchrun named:\n%s", code, r.output())
	}
	mark = marker(t)
	r = startCmd(t, exec.Command(gorun, append(c.sshArgs(), "--hosts", c.hostsFlag(1), "--torchrun", shim(t), script(t), "--tag", mark)...),
		[]string{"GORUN_MARK=" + mark, "STEPS=3"})
	if code := r.wait(t, 3*time.Minute); code != 0 || !strings.Contains(r.output(), "params-in-sync OK") {
		t.Fatalf("2-node launch from the venv's gorun: exit %d:\n%s", code, r.output())
	}
}
