package buildinfo

import (
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	if v := Version(); v == "" || strings.Contains(v, "(devel)") {
		t.Errorf("Version() = %q", v)
	}
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"(devel)", nil, "0.9.0"},
		{"", nil, "0.9.0"},
		{"v1.2.3", nil, "v1.2.3"},
		{"(devel)", vcs("vcs.revision", "0123456789abcdef", "vcs.time", "2026-12-02T00:00:00Z", "vcs.modified", "true"),
			"0.9.0 (0123456789ab+dirty, 2026-12-02T00:00:00Z)"},
		{"v1.2.3", vcs("vcs.revision", "abc", "vcs.modified", "false"), "v1.2.3 (abc)"},
		{"v0.0.0-20261206214459-4564cf34dab4", vcs("vcs.revision", "4564cf34dab4aa"), "0.9.0 (4564cf34dab4)"},
		{"v1.2.4-0.20261206214459-4564cf34dab4+dirty", nil, "0.9.0"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: tc.version}, Settings: tc.settings}
		if got := version(bi, "0.9.0\n"); got != tc.want {
			t.Errorf("version(%q, %v) = %q, want %q", tc.version, tc.settings, got, tc.want)
		}
	}
}

// TestGlibcFloor: the floor of this test binary (cgo: dynamic, glibc) is
// read from its symbols; GLIBC_ versions compare as numbers.
func TestGlibcFloor(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if got := GlibcFloor(self); !regexp.MustCompile(`^(2\.\d+(\.\d+)? or later|none \(static\))$`).MatchString(got) {
		t.Errorf("GlibcFloor(self) = %q", got)
	}
	if v, ok := glibcVersion("GLIBC_2.3.4"); !ok || !slices.Equal(v, []int{2, 3, 4}) {
		t.Errorf("glibcVersion(GLIBC_2.3.4) = %v, %v", v, ok)
	}
	if slices.Compare([]int{2, 28}, []int{2, 3, 4}) <= 0 {
		t.Errorf("2.28 is not newer than 2.3.4")
	}
	if _, ok := glibcVersion("GLIBC_PRIVATE"); ok {
		t.Errorf("GLIBC_PRIVATE read as a version")
	}
	if got := GlibcFloor("/nonexistent"); !strings.HasPrefix(got, "not known") {
		t.Errorf("GlibcFloor(/nonexistent) = %q", got)
	}
}
