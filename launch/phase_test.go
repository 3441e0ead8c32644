package launch

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPhasesDocumented: every Phase constant declared in launch has a doc
// comment, and the published --summary schema accepts its value as a
// failure's "phase" (docs/schema/gorun.summary-1.json).
func TestPhasesDocumented(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]Phase{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Phase" {
					continue
				}
				for i, n := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is no string literal", fset.Position(n.Pos()), n.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					values[n.Name] = Phase(v)
					if vs.Doc == nil || strings.TrimSpace(vs.Doc.Text()) == "" {
						t.Errorf("%s: %s (%q) has no doc comment", fset.Position(n.Pos()), n.Name, v)
					}
				}
			}
		}
	}
	// The ones launch writes (run.go, supervisor.go), so that the parse
	// above cannot come back empty unnoticed.
	for name, p := range map[string]Phase{"PhaseStart": PhaseStart, "PhaseRendezvous": PhaseRendezvous,
		"PhaseStartup": PhaseStartup, "PhaseTraining": PhaseTraining, "PhaseExit": PhaseExit,
		"PhaseHang": PhaseHang, "PhaseUnknown": PhaseUnknown} {
		if got, ok := values[name]; !ok || got != p {
			t.Errorf("%s = %q not found among the parsed constants %v", name, p, values)
		}
	}

	b, err := os.ReadFile(filepath.Join("..", "docs", "schema", "gorun.summary-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties struct {
			Failures struct {
				Items struct {
					Properties struct {
						Phase struct {
							Type any      `json:"type"`
							Enum []string `json:"enum"`
						} `json:"phase"`
					} `json:"properties"`
				} `json:"items"`
			} `json:"failures"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	ph := s.Properties.Failures.Items.Properties.Phase
	if ph.Type != "string" {
		t.Fatalf("the summary schema's failure phase is %v, not a string", ph.Type)
	}
	for name, v := range values {
		if ph.Enum != nil && !slices.Contains(ph.Enum, string(v)) {
			t.Errorf("%s (%q) is not among the summary schema's phases %q", name, v, ph.Enum)
		}
	}
}
