package cmdline

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestConfigJSONNProcPerNode(t *testing.T) {
	tests := []struct {
		name, nproc, want string
	}{
		{"integer", "8", `"nproc_per_node":8`},
		{"one", "1", `"nproc_per_node":1`},
		{"gpu", "gpu", `"nproc_per_node":"gpu"`},
		{"auto", "auto", `"nproc_per_node":"auto"`},
		{"cpu", "cpu", `"nproc_per_node":"cpu"`},
		{"xpu", "xpu", `"nproc_per_node":"xpu"`},
		{"unset, in a Config built by hand", "", `"nproc_per_node":""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultConfig("train.py")
			c.NProcPerNode = tt.nproc
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tt.want)) {
				t.Errorf("JSON %s lacks %s", b, tt.want)
			}
			var back Config
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, c) {
				t.Errorf("round trip\n got %+v\nwant %+v", back, c)
			}
		})
	}
}

// The JSON keeps Config's field order (the public contract) and every
// field, and through an encoder that does not escape HTML, as RenderJSON's,
// '<', '>' and '&' stay as they are.
func TestConfigJSONLayout(t *testing.T) {
	c := defaultConfig("train.py", "--x", "a&b<c>")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("JSON does not start with an object: %v %v", tok, err)
	}
	var keys []string
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key.(string))
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		want = append(want, strings.Split(ct.Field(i).Tag.Get("json"), ",")[0])
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys\n got %q\nwant %q", keys, want)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"a&b<c>"`)) {
		t.Errorf("JSON escapes HTML: %s", buf.Bytes())
	}
}

func TestConfigUnmarshalJSON(t *testing.T) {
	tests := []struct {
		name, json, want string
		ok               bool
	}{
		{"number", `{"nproc_per_node":4}`, "4", true},
		{"string from an older plan", `{"nproc_per_node":"4"}`, "4", true},
		{"word", `{"nproc_per_node":"gpu"}`, "gpu", true},
		{"absent", `{}`, "", true},
		{"null", `{"nproc_per_node":null}`, "", true},
		{"fraction", `{"nproc_per_node":1.5}`, "", false},
		{"bool", `{"nproc_per_node":true}`, "", false},
		{"another field of the wrong type", `{"nnodes_min":"1"}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			err := json.Unmarshal([]byte(tt.json), &c)
			if (err == nil) != tt.ok {
				t.Fatalf("Unmarshal(%s): %v, want ok %v", tt.json, err, tt.ok)
			}
			if tt.ok && c.NProcPerNode != tt.want {
				t.Errorf("NProcPerNode = %q, want %q", c.NProcPerNode, tt.want)
			}
		})
	}
}
