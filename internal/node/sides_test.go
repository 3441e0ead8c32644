package node

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is gorun's module path, the prefix of every package named below.
const module = "github.com/gorun/gorun"

// TestSideImports holds the packages to their side of the wire (issue 48):
// what runs on a node links nothing of the head's, so the node side never
// carries the head's SSH client or planner, and the head's packages never
// link the node agent or the workers' supervisors. main is both sides'
// composition root: it reaches the node side through internal/node and
// internal/rank (cmd_node.go), never the agent directly.
func TestSideImports(t *testing.T) {
	headOnly := []string{"sshexec", "envplan", "preflight/fleet", "launch", "internal/job"}
	nodeOnly := []string{"internal/agent", "internal/node", "internal/rank"}
	for _, tc := range []struct {
		name      string
		pkgs      []string
		forbidden []string
		direct    bool // only the packages' own imports, not all they depend on
	}{
		{name: "node side links nothing of the head's", pkgs: append(slices.Clone(nodeOnly), "preflight"), forbidden: headOnly},
		{name: "head side links nothing of the node's", pkgs: headOnly, forbidden: nodeOnly},
		{name: "main reaches the agent through internal/node", pkgs: []string{""}, forbidden: []string{"internal/agent"}, direct: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := "{{join .Deps \" \"}}"
			if tc.direct {
				list = "{{join .Imports \" \"}}"
			}
			args := []string{"list", "-f", "{{.ImportPath}} " + list}
			for _, p := range tc.pkgs {
				args = append(args, path(p))
			}
			cmd := exec.Command("go", args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != len(tc.pkgs) {
				t.Fatalf("go list named %d packages, want %d:\n%s", len(lines), len(tc.pkgs), out)
			}
			for _, line := range lines {
				pkg, deps, _ := strings.Cut(line, " ")
				for _, f := range tc.forbidden {
					if slices.Contains(strings.Fields(deps), path(f)) {
						t.Errorf("%s depends on %s", pkg, path(f))
					}
				}
			}
		})
	}
}

// path is the import path of the package at dir in the module ("" is main).
func path(dir string) string {
	if dir == "" {
		return module
	}
	return module + "/" + dir
}
