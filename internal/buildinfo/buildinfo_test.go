package buildinfo

import (
	"runtime/debug"
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
		{"(devel)", nil, "devel"},
		{"", nil, "devel"},
		{"v1.2.3", nil, "v1.2.3"},
		{"(devel)", vcs("vcs.revision", "0123456789abcdef", "vcs.time", "2026-12-02T00:00:00Z", "vcs.modified", "true"),
			"devel (0123456789ab+dirty, 2026-12-02T00:00:00Z)"},
		{"v1.2.3", vcs("vcs.revision", "abc", "vcs.modified", "false"), "v1.2.3 (abc)"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: tc.version}, Settings: tc.settings}
		if got := version(bi); got != tc.want {
			t.Errorf("version(%q, %v) = %q, want %q", tc.version, tc.settings, got, tc.want)
		}
	}
}
