package telemetry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/internal/testenv"
)

// sampleKeys is the JSONL schema: every line has exactly these keys. A new
// reading adds a key here and in the README.
var sampleKeys = map[string]string{
	"schema": "string", "gorun_version": "string",
	"node": "string", "gpu": "number", "uuid": "string", "ranks": "array", "local_ranks": "array",
	"time": "time", "attempt": "number",
	"sm_pct": "number?", "mem_used_mib": "number?", "power_w": "number?", "power_limit_w": "number?",
	"sm_clock_mhz": "number?", "temp_c": "number?", "pcie_rx_mbps": "number?", "pcie_tx_mbps": "number?",
	"nvlink_rx_mbps": "number?", "nvlink_tx_mbps": "number?", "clock_reasons": "array", "events": "array",
}

func writeSamples(t *testing.T) []byte {
	t.Helper()
	lib, _ := fakeNode([]*fakeGPU{busyH200(), {util: 3, noFields: true}}, nil)
	s, err := Open(lib, Config{GPUs: []GPU{{Index: 0, Ranks: []int{0}, LocalRanks: []int{0}}, {Index: 1, Ranks: []int{1}, LocalRanks: []int{1}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b bytes.Buffer
	j := NewJSONL(&b, schema.Stamp{Schema: schema.Telemetry, GorunVersion: "test"})
	t0 := time.Date(2026, 12, 1, 6, 0, 0, 123456789, time.UTC)
	for i := range 3 {
		for _, sm := range s.Sample(t0.Add(time.Duration(i) * time.Second)) {
			sm.Node, sm.Attempt = "node1", 0
			if err := j.Write(sm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := j.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestJSONLSchema(t *testing.T) {
	data := writeSamples(t)
	sc := bufio.NewScanner(bytes.NewReader(data))
	lines := 0
	for sc.Scan() {
		lines++
		var obj map[string]any
		if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		for k := range obj {
			if _, ok := sampleKeys[k]; !ok {
				t.Errorf("line %d: key %q is not in the schema", lines, k)
			}
		}
		for k, typ := range sampleKeys {
			v, ok := obj[k]
			if !ok {
				t.Errorf("line %d: key %q missing", lines, k)
				continue
			}
			switch typ {
			case "string":
				if _, ok := v.(string); !ok {
					t.Errorf("line %d: %s = %v, want a string", lines, k, v)
				}
			case "number":
				if _, ok := v.(float64); !ok {
					t.Errorf("line %d: %s = %v, want a number", lines, k, v)
				}
			case "number?":
				if _, ok := v.(float64); !ok && v != nil {
					t.Errorf("line %d: %s = %v, want a number or null", lines, k, v)
				}
			case "array":
				if _, ok := v.([]any); !ok {
					t.Errorf("line %d: %s = %v, want an array (never null)", lines, k, v)
				}
			case "time":
				s, _ := v.(string)
				if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
					t.Errorf("line %d: time %q: %v", lines, s, err)
				}
			}
		}
	}
	if lines != 6 {
		t.Errorf("%d lines, want 6 (2 GPUs x 3 samples)", lines)
	}
}

// TestJSONLPandas loads the file with pandas where it is installed, as the
// README tells users to.
func TestJSONLPandas(t *testing.T) {
	py := ""
	// The python3 on the PATH first, then Debian's, where python3-pandas
	// puts it (a pyenv shim can come first on a developer's PATH).
	for _, c := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(c); err == nil && exec.Command(p, "-c", "import pandas").Run() == nil {
			py = p
			break
		}
	}
	testenv.Need(t, py != "", "python3 with pandas is not installed (Debian: python3-pandas; .ci/run installs it); the schema test covers the format")
	path := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(path, writeSamples(t), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", `import sys, pandas as pd
df = pd.read_json(sys.argv[1], lines=True)
df["time"] = pd.to_datetime(df["time"])
print(len(df), df["gpu"].nunique(), df.groupby("gpu")["sm_pct"].mean().to_dict(), df["nvlink_rx_mbps"].isna().sum())`, path).CombinedOutput()
	if err != nil {
		t.Fatalf("pandas: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	// GPU 1 has no counters and the first sample of GPU 0 no rate: 4 NaN.
	if want := "6 2 {0: 97.0, 1: 3.0} 4"; got != want {
		t.Errorf("pandas says %q, want %q", got, want)
	}
}

// TestJSONLMatchesPublishedSchema: the lines the writer makes from the
// sampler's readings are valid against docs/schema/gorun.telemetry-1.json,
// checked by Python's jsonschema, not by this package.
func TestJSONLMatchesPublishedSchema(t *testing.T) {
	py := "/usr/bin/python3"
	testenv.Need(t, exec.Command(py, "-c", "import jsonschema").Run() == nil, "python3-jsonschema")
	c := exec.Command(py, "-c", `import json, sys, jsonschema
v = jsonschema.Draft202012Validator(json.load(open(sys.argv[1])))
for n, line in enumerate(sys.stdin, 1):
    v.validate(json.loads(line))
print(n)`, filepath.Join("..", "docs", "schema", "gorun.telemetry-1.json"))
	c.Stdin = bytes.NewReader(writeSamples(t))
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "6" {
		t.Fatalf("%v: %s", err, out)
	}
}
