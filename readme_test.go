package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/gorun/gorun/cmdline"
)

// TestREADMEAmbiguousPrefixes computes the torchrun option prefixes that
// picked one torchrun option alone and are ambiguous next to gorun's own
// options, and checks that docs/compatibility.md ("The command line and its options") lists
// exactly those.
func TestREADMEAmbiguousPrefixes(t *testing.T) {
	// torchrun's option strings as argparse matches them: both spellings
	// of every multi-word option (envplan's table has both for each), and
	// argparse's --help.
	torchrun := []string{"--help"}
	for _, n := range cmdline.TorchrunOptionNames() {
		if !strings.HasPrefix(n, "--") {
			continue
		}
		torchrun = append(torchrun, n)
		if u := "--" + strings.ReplaceAll(n[2:], "-", "_"); u != n {
			torchrun = append(torchrun, u)
		}
	}
	exact := map[string]bool{}
	for _, n := range append(slices.Clone(torchrun), cmdline.GorunOptionNames()...) {
		exact[n] = true
	}
	var became []string
	for _, n := range torchrun {
		for i := len("--x"); i < len(n); i++ {
			p := n[:i]
			if exact[p] || slices.Contains(became, p) {
				continue
			}
			matches := 0
			for _, m := range torchrun {
				if strings.HasPrefix(m, p) {
					matches++
				}
			}
			if matches != 1 { // ambiguous already in torchrun (argparse counts both spellings)
				continue
			}
			_, err := cmdline.Parse([]string{p + "=1", "train.py"}, func(string) string { return "" })
			if err != nil && strings.Contains(err.Error(), "ambiguous option") {
				became = append(became, p)
			}
		}
	}
	slices.Sort(became)

	readme, err := os.ReadFile("docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(\w+)\s+torchrun prefixes that were unambiguous alone become ambiguous next to them\s+\(([^)]*)\)`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/compatibility.md no longer has the sentence on prefixes made ambiguous")
	}
	var listed []string
	for _, q := range regexp.MustCompile("`([^`]+)`").FindAllSubmatch(m[2], -1) {
		listed = append(listed, string(q[1]))
	}
	slices.Sort(listed)
	if !slices.Equal(listed, became) {
		t.Errorf("docs/compatibility.md lists %q; the prefixes gorun's options made ambiguous are %q", listed, became)
	}
	words := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight"}
	if len(became) < len(words) && string(m[1]) != words[len(became)] {
		t.Errorf("docs/compatibility.md says %q prefixes; there are %d", m[1], len(became))
	}
}

// userDocs are the README and the docs it links to for users and
// contributors: what TestREADMECitesFilesThatExist and
// TestDocsLinksResolve read.
var userDocs = []string{"README.md", "docs/guide.md", "docs/compatibility.md", "docs/design.md"}

// TestREADMECitesFilesThatExist checks that every repository path the
// README and the docs beside it cite (docs/device/h200-2gpu/busbw.txt,
// examples/slurm/, ...) exists, and that they cite nothing in the
// project's shared reference folder, which is not in the repository
// (copy what a claim rests on into docs/).
func TestREADMECitesFilesThatExist(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, regexp.QuoteMeta(e.Name()))
		}
	}
	cited := regexp.MustCompile(`(?:^|[\s(` + "`" + `])((?:` + strings.Join(dirs, "|") + `)/[A-Za-z0-9_./-]*)`)
	seen := 0
	for _, doc := range userDocs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cited.FindAllSubmatch(text, -1) {
			p := strings.TrimRight(string(m[1]), ".,;:")
			seen++
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s cites %s, which is not in the repository", doc, p)
			}
		}
		if m := regexp.MustCompile(`(?:^|[\s(;])reference/[A-Za-z0-9_./-]+`).Find(text); m != nil {
			t.Errorf("%s cites %q, in the shared reference folder outside the repository", doc, strings.TrimSpace(string(m)))
		}
	}
	if seen < 10 {
		t.Errorf("found only %d cited paths; is the pattern still right?", seen)
	}
}

// TestDocsLinksResolve: every relative link of the README and the docs
// beside it names a file or folder of the repository, and a link to a
// heading (#anchor) one that the target has, as GitHub makes anchors.
func TestDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := func(path string) map[string]bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		out := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllSubmatch(b, -1) {
			out[githubAnchor(string(m[1]))] = true
		}
		return out
	}
	checked := 0
	for _, doc := range userDocs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllSubmatch(text, -1) {
			target := string(m[1])
			if strings.Contains(target, "://") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			checked++
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which is not in the repository", doc, target)
				continue
			}
			if anchor != "" && !anchors(path)[anchor] {
				t.Errorf("%s links to %s: %s has no heading with that anchor", doc, target, path)
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d links; is the pattern still right?", checked)
	}
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces
// to hyphens, punctuation but hyphens and underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestFigures runs docs/bench/figures.py, which recomputes the docs'
// figures from the raw files they cite; then it alters one figure in a
// copy of the docs and checks that the script fails on it.
func TestFigures(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is needed to recompute the figures: %v", err)
	}
	if out, err := exec.Command("python3", "docs/bench/figures.py").CombinedOutput(); err != nil {
		t.Fatalf("figures.py: %v\n%s", err, out)
	}
	root := t.TempDir()
	docs := filepath.Join(root, "docs")
	if err := os.MkdirAll(docs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bench", "device"} {
		abs, _ := filepath.Abs(filepath.Join("docs", d))
		if err := os.Symlink(abs, filepath.Join(docs, d)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"BENCHMARKS.md", "guide.md", "compatibility.md"} {
		b, err := os.ReadFile(filepath.Join("docs", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "BENCHMARKS.md" {
			altered := strings.Replace(string(b), "2918 ms (2865–3062)", "2818 ms (2865–3062)", 1)
			if altered == string(b) {
				t.Fatal("BENCHMARKS.md no longer has the figure this test alters")
			}
			b = []byte(altered)
		}
		if err := os.WriteFile(filepath.Join(docs, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("python3", "docs/bench/figures.py", "--root", root).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "1 mismatched") {
		t.Errorf("figures.py on an altered figure: %v, want a failure naming it:\n%s", err, out)
	}
}
