package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
)

// TestREADMEAmbiguousPrefixes computes the torchrun option prefixes that
// picked one torchrun option alone and are ambiguous next to gorun's own
// options, and checks that README's "Compatibility with torchrun" lists
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

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(\w+)\s+torchrun prefixes that were unambiguous alone become ambiguous next to them\s+\(([^)]*)\)`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README no longer has the sentence on prefixes made ambiguous")
	}
	var listed []string
	for _, q := range regexp.MustCompile("`([^`]+)`").FindAllSubmatch(m[2], -1) {
		listed = append(listed, string(q[1]))
	}
	slices.Sort(listed)
	if !slices.Equal(listed, became) {
		t.Errorf("README lists %q; the prefixes gorun's options made ambiguous are %q", listed, became)
	}
	words := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight"}
	if len(became) < len(words) && string(m[1]) != words[len(became)] {
		t.Errorf("README says %q prefixes; there are %d", m[1], len(became))
	}
}

// TestREADMECitesFilesThatExist checks that every repository path README
// cites (docs/device/h200-2gpu/busbw.txt, examples/slurm/, ...) exists,
// and that it cites nothing in the project's shared reference folder,
// which is not in the repository (copy what a claim rests on into docs/).
func TestREADMECitesFilesThatExist(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
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
	for _, m := range cited.FindAllSubmatch(readme, -1) {
		p := strings.TrimRight(string(m[1]), ".,;:")
		seen++
		if _, err := os.Stat(p); err != nil {
			t.Errorf("README cites %s, which is not in the repository", p)
		}
	}
	if seen < 10 {
		t.Errorf("found only %d cited paths; is the pattern still right?", seen)
	}
	if m := regexp.MustCompile(`(?:^|[\s(;])reference/[A-Za-z0-9_./-]+`).Find(readme); m != nil {
		t.Errorf("README cites %q, in the shared reference folder outside the repository", strings.TrimSpace(string(m)))
	}
}
