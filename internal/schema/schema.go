// Package schema is what every machine-readable output of gorun carries
// about itself (Stamp: which format, which gorun, which Slurm job or
// Kubernetes pod), and the JSON Schema of each format, made from the Go
// types that write it (For), so that a published schema cannot drift from
// the output. docs/schema/ holds them; docs/guide.md, "Machine-readable
// outputs", lists them.
package schema

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/buildinfo"
)

// The formats, each with its version: a version changes when a field is
// removed or changes meaning, never when one is added.
const (
	Summary   = "gorun.summary/1"   // --summary FILE
	Telemetry = "gorun.telemetry/1" // --telemetry FILE, each line
	Preflight = "gorun.preflight/1" // gorun preflight --json
	Hosts     = "gorun.hosts/1"     // gorun hosts --json
	Topology  = "gorun.topology/1"  // gorun preflight --topo-file FILE --json
)

// Stamp opens every output: its format and where it came from.
type Stamp struct {
	Schema       string `json:"schema"`        // one of the formats above
	GorunVersion string `json:"gorun_version"` // buildinfo.Version
	// SlurmJobID is SLURM_JOB_ID where gorun ran inside an allocation.
	SlurmJobID string `json:"slurm_job_id,omitempty"`
	// KubernetesPod is the pod's name where gorun ran in one (HOSTNAME,
	// which Kubernetes sets to it, where KUBERNETES_SERVICE_HOST is set).
	KubernetesPod string `json:"kubernetes_pod,omitempty"`
}

// NewStamp is format's stamp for this process, its environment read
// through getenv (nil: an empty environment).
func NewStamp(format string, getenv func(string) string) Stamp {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	s := Stamp{Schema: format, GorunVersion: buildinfo.Version(), SlurmJobID: getenv("SLURM_JOB_ID")}
	if getenv("KUBERNETES_SERVICE_HOST") != "" {
		s.KubernetesPod = getenv("HOSTNAME")
	}
	return s
}

// For is the JSON Schema (draft 2020-12) of what encoding/json writes for
// a value of v's type, titled format: every field, its type (a pointer, a
// nil slice or map may be null), required unless omitempty, no other
// field. Types that marshal themselves are refused: their shape is not
// the struct's.
func For(format, description string, v any) (map[string]any, error) {
	s, err := of(reflect.TypeOf(v), map[reflect.Type]bool{})
	if err != nil {
		return nil, err
	}
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	s["title"] = format
	if props, ok := s["properties"].(map[string]any); ok && props["schema"] != nil {
		props["schema"] = map[string]any{"const": format} // a Stamp's: this format and no other
	}
	s["description"] = description
	return s, nil
}

func of(t reflect.Type, seen map[reflect.Type]bool) (map[string]any, error) {
	switch {
	case t == reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}, nil
	case t.Implements(reflect.TypeOf((*interface{ MarshalJSON() ([]byte, error) })(nil)).Elem()):
		return nil, fmt.Errorf("%s marshals itself", t)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return nullable(of(t.Elem(), seen))
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Slice, reflect.Array:
		items, err := of(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		s := map[string]any{"type": "array", "items": items}
		if t.Kind() == reflect.Slice {
			return nullable(s, nil)
		}
		return s, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: a map's keys must be strings", t)
		}
		vals, err := of(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return nullable(map[string]any{"type": "object", "additionalProperties": vals}, nil)
	case reflect.Interface:
		return map[string]any{}, nil // anything
	case reflect.Struct:
		if seen[t] {
			return nil, fmt.Errorf("%s refers to itself", t)
		}
		seen[t] = true
		defer delete(seen, t)
		props, required := map[string]any{}, []any{}
		if err := fields(t, seen, props, &required); err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}, nil
	}
	return nil, fmt.Errorf("%s: no JSON Schema for kind %s", t, t.Kind())
}

// fields adds t's fields as encoding/json writes them: by their tag's
// name, an embedded struct's fields as the outer's, "-" left out.
func fields(t reflect.Type, seen map[reflect.Type]bool, props map[string]any, required *[]any) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			if err := fields(f.Type, seen, props, required); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		s, err := of(f.Type, seen)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t, f.Name, err)
		}
		if strings.Contains(","+opts+",", ",omitempty,") {
			s = notNull(s) // absent rather than null or empty
		} else {
			*required = append(*required, name)
		}
		props[name] = s
	}
	return nil
}

func nullable(s map[string]any, err error) (map[string]any, error) {
	if err != nil {
		return nil, err
	}
	switch ty := s["type"].(type) {
	case string:
		s["type"] = []any{ty, "null"}
	case nil: // anything: null included
	}
	return s, nil
}

// notNull takes null back out of an omitempty field's types: encoding/json
// leaves a nil pointer, slice or map out instead of writing null.
func notNull(s map[string]any) map[string]any {
	if ty, ok := s["type"].([]any); ok && len(ty) == 2 && ty[1] == "null" {
		s["type"] = ty[0]
	}
	return s
}
