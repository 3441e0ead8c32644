package sshexec

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChooseBuild: the build for the node's architecture, where its glibc
// is new enough; why not, where none fits.
func TestChooseBuild(t *testing.T) {
	amd := Binary{Name: "gorun-a", Arch: "amd64", Glibc: []int{2, 34}}
	arm := Binary{Name: "gorun-b", Arch: "arm64", Glibc: []int{2, 17}}
	for _, tc := range []struct {
		arch, glibc, want, why string
	}{
		{"x86_64", "glibc 2.36", "gorun-a", ""},
		{"aarch64", "glibc 2.28", "gorun-b", ""},
		{"x86_64", "glibc 2.28", "", "needs glibc 2.34 or later"},
		{"x86_64", "", "", "needs glibc 2.34 or later"}, // musl: no glibc to read
		{"ppc64le", "glibc 2.34", "", "built for amd64, arm64 only"},
		{"sparc", "glibc 2.34", "", "no build for that architecture"},
	} {
		b, why := choose([]Binary{amd, arm}, tc.arch, tc.glibc)
		if b.Name != tc.want || !strings.Contains(why, tc.why) || (tc.why == "") != (why == "") {
			t.Errorf("%s %q: %q, %q; want %q, %q", tc.arch, tc.glibc, b.Name, why, tc.want, tc.why)
		}
	}
	if b, why := choose([]Binary{{Name: "static", Arch: "amd64"}}, "x86_64", ""); b.Name != "static" || why != "" {
		t.Errorf("a static build on a node without glibc: %q, %q", b.Name, why)
	}
}

// TestLauncherPicksByArch: with builds for two architectures, the
// launcher runs the node's own (by uname -m) and passes the arguments on
// untouched; without, the head's.
func TestLauncherPicksByArch(t *testing.T) {
	home := t.TempDir()
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "uname"), []byte("#!/bin/sh\necho aarch64\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, "gorun")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gorun-a", "gorun-b"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\necho "+n+" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	amd, arm := Binary{Name: "gorun-a", Arch: "amd64"}, Binary{Name: "gorun-b", Arch: "arm64"}
	run := func(cmd string) string {
		c := exec.Command("sh", "-c", cmd)
		c.Env = []string{"XDG_CACHE_HOME=" + home, "PATH=" + fake + ":/usr/bin:/bin"}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run(launchCommand(amd, []Binary{arm}, false, "_agent", "x y")); got != "gorun-b _agent x y" {
		t.Errorf("an aarch64 node ran %q, want gorun-b with the arguments", got)
	}
	if got := run(launchCommand(amd, nil, false, "_agent")); got != "gorun-a _agent" {
		t.Errorf("no other build: %q", got)
	}
}
