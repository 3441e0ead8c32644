// Package buildinfo says which build of gorun this is: the version (the
// module version `go install` stamps, else the VERSION file beside this
// one, which a release sets), the commit and time the Go toolchain stamped
// into the binary, the Go version, the platform, and the oldest glibc the
// binary starts on, read from its own dynamic symbols. It reads the
// running binary and nothing else.
package buildinfo

import (
	"cmp"
	"debug/elf"
	_ "embed"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// release is the VERSION file: the version of a build from a checkout.
//
//go:embed VERSION
var release string

// Version is the version with the revision and time of the commit it
// was built from ("+dirty" when the work tree had changes):
// "0.9.0 (0123456789ab+dirty, 2026-12-02T00:00:00Z)".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return strings.TrimSpace(release)
	}
	return version(bi, release)
}

func version(bi *debug.BuildInfo, release string) string {
	v := bi.Main.Version
	if v == "" || v == "(devel)" || pseudo().MatchString(v) {
		// A build from a checkout: Go 1.24 and later stamp a pseudo-version
		// made of the commit, which says less than VERSION with it.
		v = cmp.Or(strings.TrimSpace(release), "devel")
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if at != "" {
		at = ", " + at
	}
	return fmt.Sprintf("%s (%s%s%s)", v, rev, dirty, at)
}

// pseudo matches a Go pseudo-version's tail ("v0.0.0-20261206214459-4564cf34dab4",
// "v1.2.4-0.20261206214459-4564cf34dab4+dirty").
var pseudo = lazyre.New(`(^|[-.])\d{14}-[0-9a-f]{12}(\+dirty)?$`)

// Describe is what `gorun version` prints: the version line, then the Go
// version, the platform and the glibc floor, a line each.
func Describe() string {
	floor := "not known (" + os.Args[0] + " could not be read)"
	if self, err := os.Executable(); err == nil {
		floor = GlibcFloor(self)
	}
	return fmt.Sprintf("gorun %s\ngo: %s\nplatform: %s/%s\nglibc: %s\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH, floor)
}

// GlibcFloor says which glibc the binary at path needs: "2.28 or later"
// (the newest GLIBC_ symbol version it imports), "none (static)", or why
// it cannot tell.
func GlibcFloor(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "not known (" + err.Error() + ")"
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil || len(syms) == 0 {
		return "none (static)"
	}
	var newest []int
	for _, s := range syms {
		if v, ok := glibcVersion(s.Version); ok && slices.Compare(v, newest) > 0 {
			newest = v
		}
	}
	if newest == nil {
		return "none (no glibc symbol versions)"
	}
	parts := make([]string, len(newest))
	for i, n := range newest {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ".") + " or later"
}

// glibcVersion reads "GLIBC_2.3.4" as [2 3 4].
func glibcVersion(s string) ([]int, bool) {
	rest, ok := strings.CutPrefix(s, "GLIBC_")
	if !ok {
		return nil, false
	}
	var v []int
	for _, p := range strings.Split(rest, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		v = append(v, n)
	}
	return v, true
}
