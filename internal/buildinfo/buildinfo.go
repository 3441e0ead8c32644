// Package buildinfo says which build of gorun this is: the module version
// a release carries, else "devel", with the VCS revision and time the Go
// toolchain stamped into the binary. It reads the running binary's build
// information and nothing else.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Version is the module version a release build carries, else "devel",
// with the revision and time of the commit it was built from ("+dirty"
// when the work tree had changes): "devel (0123456789ab+dirty,
// 2026-12-02T00:00:00Z)".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return version(bi)
}

func version(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
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
