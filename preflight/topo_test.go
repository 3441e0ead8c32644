package preflight

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The -update flag rewrites golden files. It is registered in init, after
// every package-level variable, so another test file of this package may
// register it first without a clash.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// checkGolden compares got with testdata file path, rewriting it under -update.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if updateGolden() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

func readTestdata(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func findingIDs(fs []Finding) []string {
	var ids []string
	for _, f := range fs {
		ids = append(ids, string(f.Severity)+" "+f.ID)
	}
	return ids
}

func TestExplainTopologyGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/topo/*.txt")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no topology captures: %v", err)
	}
	for _, in := range inputs {
		base := strings.TrimSuffix(filepath.Base(in), ".txt")
		if strings.HasPrefix(base, "bad-") {
			continue
		}
		t.Run(base, func(t *testing.T) {
			data := readTestdata(t, filepath.Join("topo", base+".txt"))
			r, err := ExplainTopology(base+".txt", data)
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", "topo", "golden", base+".json"), append(js, '\n'))
			var text bytes.Buffer
			r.WriteText(&text)
			checkGolden(t, filepath.Join("testdata", "topo", "golden", base+".out"), text.Bytes())
		})
	}
}

func TestExplainTopologyFacts(t *testing.T) {
	tests := []struct {
		file     string
		gpus     int
		nics     int
		cell     [3]string // row, column, path
		gpu      TopoGPU   // one GPU row to compare
		findings []string  // "severity id", in order
	}{
		{
			file: "h200-1gpu.txt", gpus: 1,
			gpu:      TopoGPU{Name: "GPU0", CPUAffinity: "0-15", NUMAAffinity: "0"},
			findings: []string{"ok topo.gpus"},
		},
		{
			file: "h200-2gpu.txt", gpus: 2, cell: [3]string{"GPU1", "GPU0", "NV18"},
			gpu:      TopoGPU{Name: "GPU1", CPUAffinity: "0-31", NUMAAffinity: "0"},
			findings: []string{"ok topo.nvlink"},
		},
		{
			file: "h200-2gpu-mp.txt", gpus: 2, cell: [3]string{"GPU0", "GPU1", "PHB"},
			gpu:      TopoGPU{Name: "GPU0", CPUAffinity: "0-31", NUMAAffinity: "0"},
			findings: []string{"ok topo.pcie-paths"},
		},
		{
			file: "dgx-h100.txt", gpus: 8, nics: 8, cell: [3]string{"GPU5", "NIC5", "PIX"},
			gpu:      TopoGPU{Name: "GPU4", CPUAffinity: "56-111,168-223", NUMAAffinity: "1"},
			findings: []string{"ok topo.nvlink", "ok topo.numa-split", "ok topo.nic-nearest"},
		},
		{
			file: "pcie-2socket-legacy.txt", gpus: 4, nics: 1, cell: [3]string{"mlx5_0", "GPU2", "SYS"},
			gpu:      TopoGPU{Name: "GPU3", CPUAffinity: "20-39,60-79", NUMAAffinity: "1"},
			findings: []string{"ok topo.pcie-only", "warn topo.cross-socket", "ok topo.numa-split", "ok topo.nic-nearest", "warn topo.nic-far"},
		},
		{
			file: "nvlink-bridges-vm.txt", gpus: 4, cell: [3]string{"GPU2", "GPU3", "NV4"},
			gpu:      TopoGPU{Name: "GPU0", CPUAffinity: "0-63"},
			findings: []string{"warn topo.nvlink-missing", "warn topo.numa-unknown"},
		},
		{
			file: "asymmetric.txt", gpus: 2, cell: [3]string{"GPU1", "GPU0", "PHB"},
			gpu:      TopoGPU{Name: "GPU0", CPUAffinity: "0-31", NUMAAffinity: "0"},
			findings: []string{"warn topo.asymmetric", "ok topo.nvlink"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r, err := ExplainTopology(tt.file, readTestdata(t, "topo/"+tt.file))
			if err != nil {
				t.Fatal(err)
			}
			topo := r.Topology
			if len(topo.GPUs) != tt.gpus || len(topo.NICs) != tt.nics {
				t.Errorf("got %d GPUs %d NICs, want %d and %d", len(topo.GPUs), len(topo.NICs), tt.gpus, tt.nics)
			}
			if tt.cell[0] != "" {
				if got := topo.Matrix[tt.cell[0]][tt.cell[1]]; got != tt.cell[2] {
					t.Errorf("matrix[%s][%s] = %q, want %q", tt.cell[0], tt.cell[1], got, tt.cell[2])
				}
			}
			i := slices.IndexFunc(topo.GPUs, func(g TopoGPU) bool { return g.Name == tt.gpu.Name })
			if i < 0 || topo.GPUs[i] != tt.gpu {
				t.Errorf("GPUs = %+v, want one %+v", topo.GPUs, tt.gpu)
			}
			if got := findingIDs(r.Findings); !slices.Equal(got, tt.findings) {
				t.Errorf("findings %q, want %q", got, tt.findings)
			}
			for _, f := range r.Findings {
				if f.Message == "" || f.Evidence == "" || (f.Severity != SeverityOK && f.Remedy == "") {
					t.Errorf("finding %s lacks message, evidence or remedy: %+v", f.ID, f)
				}
			}
		})
	}
}

func TestExplainTopologyDGXDetails(t *testing.T) {
	r, err := ExplainTopology("dgx-h100.txt", readTestdata(t, "topo/dgx-h100.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range r.Topology.NICs {
		if want := "mlx5_" + string(rune('0'+i)); n.Device != want {
			t.Errorf("NIC%d device %q, want %q", i, n.Device, want)
		}
	}
	near := r.Findings[2]
	for _, want := range []string{"GPU0 → NIC0 mlx5_0 (PIX)", "GPU7 → NIC7 mlx5_7 (PIX)"} {
		if !strings.Contains(near.Evidence, want) {
			t.Errorf("nearest-NIC evidence %q lacks %q", near.Evidence, want)
		}
	}
	if !strings.Contains(r.Findings[1].Evidence, "NUMA 1: GPU4 GPU5 GPU6 GPU7 (CPUs 56-111,168-223)") {
		t.Errorf("NUMA evidence %q", r.Findings[1].Evidence)
	}
	if got := len(r.Topology.Matrix["GPU0"]); got != 15 {
		t.Errorf("GPU0 has %d peers in the matrix, want 15", got)
	}
	if _, self := r.Topology.Matrix["GPU0"]["GPU0"]; self {
		t.Error("matrix holds the diagonal")
	}
}

// The same matrix pasted with spaces, CRLF, a shell prompt and no legend, or
// with mixed line endings, must read exactly like the original.
func TestParseTopoMatrixFormats(t *testing.T) {
	want, err := ParseTopoMatrix(readTestdata(t, "topo/dgx-h100.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"dgx-h100-spaces-crlf.txt", "dgx-h100-crlf-mix.txt"} {
		t.Run(file, func(t *testing.T) {
			got, err := ParseTopoMatrix(readTestdata(t, "topo/"+file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestExplainTopologyRefusesDamage(t *testing.T) {
	tests := []struct {
		file string
		want string // substring of the error
	}{
		{"bad-truncated-row.txt", "bad-truncated-row.txt:7:56: row GPU5 has 11 cells, want 19"},
		{"bad-token.txt", `bad-token.txt:4:6: unknown path type "NV1B" at GPU2/GPU0`},
		{"bad-duplicate-row.txt", "bad-duplicate-row.txt:5:1: duplicate row GPU2"},
		{"bad-no-header.txt", "bad-no-header.txt:1:1: matrix row GPU0 before any header line"},
		{"bad-cut-off.txt", "bad-cut-off.txt:13: matrix ends without a row for NIC3"},
		{"bad-diagonal.txt", `bad-diagonal.txt:3:11: GPU1/GPU1 is "NV12", want X on the diagonal`},
		{"bad-extra-cell.txt", "bad-extra-cell.txt:3:27: row GPU1 has 6 cells, want 5"},
		{"bad-not-topo.txt", "bad-not-topo.txt:1: no header line naming GPU0"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, err := ExplainTopology(tt.file, readTestdata(t, "topo/"+tt.file))
			if !errors.Is(err, ErrBadCapture) {
				t.Fatalf("err = %v, want ErrBadCapture", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseTopoHeaderErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"duplicate column", "\tGPU0\tGPU0\nGPU0\t X \tNV1\n", "header names GPU0 twice"},
		{"junk after affinity", "\tGPU0\tCPU Affinity\tbogus\nGPU0\t X \t0\n", `unknown header column "bogus"`},
		{"odd device", "\tGPU0\tGPU1!\nGPU0\t X \tNV1\n", `header cell "GPU1!" is not a GPU or NIC name`},
		{"unknown row", "\tGPU0\nGPU9\t X\n", `row "GPU9" is not a column`},
		{"empty", "", "no header line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTopoMatrix([]byte(tt.text))
			if !errors.Is(err, ErrBadCapture) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrBadCapture containing %q", err, tt.want)
			}
		})
	}
}

func FuzzExplainTopology(f *testing.F) {
	files, _ := filepath.Glob("testdata/topo/*.txt")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ExplainTopology("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrBadCapture) {
				t.Fatalf("error %v does not wrap ErrBadCapture", err)
			}
			return
		}
		var b bytes.Buffer
		r.WriteText(&b)
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
		if len(r.Topology.GPUs) == 0 {
			t.Fatal("accepted a matrix without GPUs")
		}
	})
}
