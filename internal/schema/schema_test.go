package schema

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type inner struct {
	N int `json:"n"`
}

type sample struct {
	Stamp
	Name     string            `json:"name"`
	Opt      string            `json:"opt,omitempty"`
	Ptr      *float64          `json:"ptr"`
	List     []inner           `json:"list"`
	Map      map[string]string `json:"map,omitempty"`
	At       time.Time         `json:"at"`
	Hidden   int               `json:"-"`
	internal int
}

type selfMarshal struct{}

func (selfMarshal) MarshalJSON() ([]byte, error) { return []byte(`"x"`), nil }

// TestFor: the schema is what encoding/json writes: embedded fields
// inlined, omitempty fields optional and never null, pointers and nil
// slices nullable, "-" and unexported fields absent, the stamp's schema a
// constant. A type that marshals itself has no schema from its fields.
func TestFor(t *testing.T) {
	s, err := For("gorun.test/1", "a test", sample{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	var got map[string]any
	json.Unmarshal(b, &got)
	props := got["properties"].(map[string]any)
	want := map[string]any{
		"schema":         map[string]any{"const": "gorun.test/1"},
		"gorun_version":  map[string]any{"type": "string"},
		"slurm_job_id":   map[string]any{"type": "string"},
		"kubernetes_pod": map[string]any{"type": "string"},
		"name":           map[string]any{"type": "string"},
		"opt":            map[string]any{"type": "string"},
		"ptr":            map[string]any{"type": []any{"number", "null"}},
		"list": map[string]any{"type": []any{"array", "null"}, "items": map[string]any{"type": "object",
			"properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []any{"n"}, "additionalProperties": false}},
		"map": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
		"at":  map[string]any{"type": "string", "format": "date-time"},
	}
	if !reflect.DeepEqual(props, want) {
		t.Errorf("properties:\n got %v\nwant %v", props, want)
	}
	if req := got["required"]; !reflect.DeepEqual(req, []any{"schema", "gorun_version", "name", "ptr", "list", "at"}) {
		t.Errorf("required = %v", req)
	}
	if _, err := For("x/1", "", struct{ V selfMarshal }{}); err == nil {
		t.Error("a type that marshals itself was given a schema")
	}
}

func TestNewStamp(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "77", "KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "job-node-0-0"}
	s := NewStamp(Summary, func(k string) string { return env[k] })
	if s.Schema != Summary || s.GorunVersion == "" || s.SlurmJobID != "77" || s.KubernetesPod != "job-node-0-0" {
		t.Errorf("stamp = %+v", s)
	}
	if s := NewStamp(Hosts, nil); s.SlurmJobID != "" || s.KubernetesPod != "" {
		t.Errorf("no environment: %+v", s)
	}
}
