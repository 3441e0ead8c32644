package logdir

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// attempt makes what a torchrun with --log-dir dir makes for local ranks
// 0 and 1, and returns local rank 0's TORCHELASTIC_ERROR_FILE.
func attempt(t *testing.T, dir, folder string) string {
	t.Helper()
	for _, lr := range []string{"0", "1"} {
		d := filepath.Join(dir, folder, "attempt_0", lr)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "stdout.log"), []byte(folder+" "+lr+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, folder, "attempt_0", "0", "error.json")
}

// tree lists the files under dir, relative, links followed.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	var walk func(rel string)
	walk = func(rel string) {
		entries, err := os.ReadDir(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			p := filepath.Join(rel, e.Name())
			if fi, err := os.Stat(filepath.Join(dir, p)); err == nil && fi.IsDir() {
				walk(p)
				continue
			}
			b, _ := os.ReadFile(filepath.Join(dir, p))
			out = append(out, p+": "+strings.TrimSpace(string(b)))
		}
	}
	walk("")
	slices.Sort(out)
	return out
}

// TestAttemptsInOneFolder: three attempts, each a torchrun folder of its
// own, end as one run folder with attempt_0..2; another run and another
// node sharing the folder are left alone; while an attempt runs, the
// run's folder shows it through a link.
func TestAttemptsInOneFolder(t *testing.T) {
	dir := t.TempDir()
	agent := t.TempDir()
	other := attempt(t, dir, "none_other")
	if err := Begin(other, dir, "run0", "node1", 0, agent); err != nil {
		t.Fatal(err)
	}
	for k, folder := range []string{"none_a", "none_b", "none_c"} {
		ef := attempt(t, dir, folder)
		if err := Begin(ef, dir, "run1", "node1", k, agent); err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			live := filepath.Join(dir, "none_a", "attempt_"+string(rune('0'+k)), "1", "stdout.log")
			if b, err := os.ReadFile(live); err != nil || string(b) != folder+" 1\n" {
				t.Errorf("attempt %d while it runs: %q, %v", k, b, err)
			}
		}
		if err := Finish(agent); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"none_a/.gorun-run: run1 node1",
		"none_a/attempt_0/0/stdout.log: none_a 0", "none_a/attempt_0/1/stdout.log: none_a 1",
		"none_a/attempt_1/0/stdout.log: none_b 0", "none_a/attempt_1/1/stdout.log: none_b 1",
		"none_a/attempt_2/0/stdout.log: none_c 0", "none_a/attempt_2/1/stdout.log: none_c 1",
		"none_other/.gorun-run: run0 node1",
		"none_other/attempt_0/0/stdout.log: none_other 0", "none_other/attempt_0/1/stdout.log: none_other 1",
	}
	if got := tree(t, dir); !slices.Equal(got, want) {
		t.Errorf("log dir:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if fi, err := os.Lstat(filepath.Join(dir, "none_a", "attempt_2")); err != nil || !fi.IsDir() {
		t.Errorf("attempt_2 after its attempt: %v, %v, want a folder", fi, err)
	}
	// torchrun's temporary folder (no --log-dir): nothing moved.
	tmp := attempt(t, t.TempDir(), "torchelastic_x")
	if err := Begin(tmp, dir, "run1", "node1", 3, agent); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(agent, pendingFile)); err == nil {
		t.Errorf("a move left for a folder outside --log-dir")
	}
}
