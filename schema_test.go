package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/telemetry"
)

var updateSchemas = flag.Bool("update-schemas", false, "rewrite docs/schema/ from the types")

// outputFormats are gorun's machine-readable outputs: each format, what
// it is, and the type that writes it. docs/schema/ holds their schemas.
var outputFormats = []struct {
	format, description string
	v                   any
}{
	{schema.Summary, "gorun --summary FILE: the run, written once it ends, whatever its end", job.Summary{}},
	{schema.Telemetry, "gorun --telemetry FILE: one line of the JSON Lines file, a GPU's sample", telemetry.Line{}},
	{schema.Preflight, "gorun preflight --json: every node's facts and findings", preflightJSON{}},
	{schema.Topology, "gorun preflight --topo-file FILE --json: a saved nvidia-smi topo -m, explained", topologyJSON{}},
	{schema.Hosts, "gorun hosts --json: the nodes and their slots, as a launch would resolve them", hostsJSON{}},
}

// SchemaFile is where format's published schema is.
func schemaFile(format string) string {
	return filepath.Join("docs", "schema", strings.ReplaceAll(format, "/", "-")+".json")
}

// TestSchemas: every published schema is the one its type makes now (a
// field added, renamed or removed changes it: go test -run TestSchemas
// -update-schemas . rewrites them, and the diff is the change to review).
// examples/schema_test.go validates real outputs against them.
func TestSchemas(t *testing.T) {
	for _, f := range outputFormats {
		s, err := schema.For(f.format, f.description, f.v)
		if err != nil {
			t.Fatalf("%s: %v", f.format, err)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		path := schemaFile(f.format)
		if *updateSchemas {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		old, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(old, b.Bytes()) {
			t.Errorf("%s is not %s's schema as its type makes it now (%v): go test -run TestSchemas -update-schemas .", path, f.format, err)
		}
	}
}
