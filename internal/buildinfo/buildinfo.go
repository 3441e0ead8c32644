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
	b, err := ReadBinary(path)
	switch {
	case err != nil:
		return "not known (" + err.Error() + ")"
	case b.Static:
		return "none (static)"
	case b.Glibc == nil:
		return "none (no glibc symbol versions)"
	}
	return VersionString(b.Glibc) + " or later"
}

// Binary is what a gorun binary needs of a machine to run there.
type Binary struct {
	Arch   string // GOARCH: amd64, arm64, ... ("" when the ELF machine is another)
	Glibc  []int  // the newest GLIBC_ symbol version it imports; nil: none
	Static bool   // no dynamic symbols at all
}

// ReadBinary reads the ELF file at path for its architecture and glibc
// floor.
func ReadBinary(path string) (Binary, error) {
	f, err := elf.Open(path)
	if err != nil {
		return Binary{}, err
	}
	defer f.Close()
	var b Binary
	switch f.Machine {
	case elf.EM_X86_64:
		b.Arch = "amd64"
	case elf.EM_AARCH64:
		b.Arch = "arm64"
	case elf.EM_PPC64:
		b.Arch = "ppc64le"
	case elf.EM_S390:
		b.Arch = "s390x"
	case elf.EM_RISCV:
		b.Arch = "riscv64"
	case elf.EM_386:
		b.Arch = "386"
	}
	syms, err := f.ImportedSymbols()
	if err != nil || len(syms) == 0 {
		b.Static = true
		return b, nil
	}
	for _, s := range syms {
		if v, ok := glibcVersion(s.Version); ok && slices.Compare(v, b.Glibc) > 0 {
			b.Glibc = v
		}
	}
	return b, nil
}

// ParseGlibc reads a glibc version as getconf GNU_LIBC_VERSION or ldd
// --version print it ("glibc 2.28", "ldd (GNU libc) 2.31"): its last
// word's numbers; false when there are none.
func ParseGlibc(s string) ([]int, bool) {
	f := strings.Fields(strings.TrimSpace(s))
	if len(f) == 0 {
		return nil, false
	}
	return glibcVersion("GLIBC_" + f[len(f)-1])
}

// VersionString writes [2 28] as "2.28".
func VersionString(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ".")
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
