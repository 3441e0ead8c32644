package preflight

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestQueryGPUArgs(t *testing.T) {
	args := QueryGPUArgs()
	want := []string{
		"--query-gpu=index,name,uuid,pci.bus_id,memory.total,compute_mode,persistence_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
		"--format=csv,noheader,nounits",
	}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("QueryGPUArgs() = %q, want %q", args, want)
	}
}

func TestParseQueryGPU(t *testing.T) {
	h200 := func(i int, uuid, bus string) GPUFacts {
		return GPUFacts{Index: i, Name: "NVIDIA H200", UUID: uuid, BusID: bus, MemoryMiB: 143771,
			ComputeMode: "Default", Persistence: true, PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16, NUMANode: -1}
	}
	tests := []struct {
		name string
		file string
		text string
		want []GPUFacts
	}{
		{
			name: "h200 2gpu", file: "h200-2gpu-query.csv",
			want: []GPUFacts{
				h200(0, "GPU-1edee708-dd0a-0f87-072f-1c0491f52727", "0000:00:06.0"),
				h200(1, "GPU-049bea5b-e16f-bd1d-8992-7c215f23c357", "0000:00:07.0"),
			},
		},
		{
			name: "unknowns and CRLF", file: "mixed-unknowns.csv",
			want: []GPUFacts{
				{Index: 0, Name: "NVIDIA A100-SXM4-80GB", UUID: "GPU-6f1c3b2a-0000-1111-2222-333344445555", BusID: "0000:07:00.0",
					MemoryMiB: 81920, ComputeMode: "Exclusive_Process", PCIeGen: 1, PCIeGenMax: 4, PCIeWidth: 16, PCIeWidthMax: 16, NUMANode: -1},
				{Index: 1, Name: "GRID A100-40C", UUID: "GPU-0a0b0c0d-1111-2222-3333-444455556666", BusID: "000a:1b:00.0",
					MemoryMiB: 40960, ComputeMode: "Default", NUMANode: -1,
					Unsupported: []string{"pcie.link.gen.current: N/A", "pcie.link.gen.max: N/A", "pcie.link.width.current: N/A",
						"pcie.link.width.max: N/A", "persistence_mode: Not Supported"}},
			},
		},
		{
			name: "header and units tolerated",
			text: "index, name, uuid, pci.bus_id, memory.total [MiB], compute_mode, persistence_mode, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max\n" +
				"0, NVIDIA H200, GPU-x, 00000000:00:06.0, 143771 MiB, Default, Enabled, 5, 5, 16, 16\n",
			want: []GPUFacts{h200(0, "GPU-x", "0000:00:06.0")},
		},
		{name: "empty", text: "\n\n", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.text)
			if tt.file != "" {
				in = readTestdata(t, "nvsmi/"+tt.file)
			}
			got, err := ParseQueryGPU(in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseQueryGPURefuses(t *testing.T) {
	row := "0, NVIDIA H200, GPU-x, 00000000:00:06.0, 143771, Default, Enabled, 5, 5, 16, 16"
	tests := []struct {
		name, text, want string
	}{
		// The real capture used a different field list; it must not be misread.
		{"other field list", string(readTestdata(t, "nvsmi/h200-2gpu-query-other-fields.txt")), ":1: 13 fields, want 11"},
		{"short row", "0, NVIDIA H200, GPU-x\n", ":1: 3 fields, want 11"},
		{"bad index", strings.Replace(row, "0,", "x,", 1), `index: "x" is not a GPU index`},
		{"bad bus id", strings.Replace(row, "00000000:00:06.0", "06.0", 1), `PCI bus id "06.0"`},
		{"bad memory", strings.Replace(row, "143771", "lots", 1), `memory.total: "lots" is not a number`},
		{"bad compute mode", strings.Replace(row, "Default", "Shared", 1), `compute_mode: unknown value "Shared"`},
		{"bad persistence", strings.Replace(row, "Enabled", "On", 1), `persistence_mode: unknown value "On"`},
		{"bad width", strings.Replace(row, "16, 16", "x16, 16", 1), `pcie.link.width.current: "x16"`},
		{"duplicate index", row + "\n" + row + "\n", ":2: GPU index 0 listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseQueryGPU([]byte(tt.text))
			if !errors.Is(err, ErrBadCapture) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrBadCapture containing %q", err, tt.want)
			}
		})
	}
}

func TestSysfsBusID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"00000000:18:00.0", "0000:18:00.0"},
		{"00000000:9A:00.0", "0000:9a:00.0"},
		{"0000:C3:00.1", "0000:c3:00.1"},
		{"00010000:01:00.0", "10000:01:00.0"}, // VMD domains keep five digits, as sysfs does
		{"18:00.0", ""},
		{"0000:18:00", ""},
		{"0000:18:20.0", ""},
		{"0000:118:00.0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := SysfsBusID(tt.in)
			if (err != nil) != (tt.want == "") || got != tt.want {
				t.Errorf("SysfsBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseP2PMatrix(t *testing.T) {
	tests := []struct {
		name string
		file string
		text string
		want [][]string
	}{
		{name: "h200 1gpu read", file: "h200-1gpu-p2p-r.txt", want: [][]string{{"X"}}},
		{name: "h200 2gpu read", file: "h200-2gpu-p2p-r.txt", want: [][]string{{"X", "OK"}, {"OK", "X"}}},
		{name: "h200 2gpu write", file: "h200-2gpu-p2p-w.txt", want: [][]string{{"X", "OK"}, {"OK", "X"}}},
		{name: "h200 2gpu nvlink", file: "h200-2gpu-p2p-n.txt", want: [][]string{{"X", "OK"}, {"OK", "X"}}},
		{name: "h200 2gpu atomics", file: "h200-2gpu-p2p-a.txt", want: [][]string{{"X", "OK"}, {"OK", "X"}}},
		{
			name: "every status, spaces, CRLF, rows out of order",
			text: "        GPU0 GPU1 GPU2 GPU3\r\n" +
				"GPU1    CNS  X    GNS  DR\r\n" +
				"GPU0    X    CNS  TNS  NS\r\n" +
				"GPU3    NS   DR   U    X\r\n" +
				"GPU2    TNS  GNS  X    U\r\n\r\nLegend:\r\n  X    = Self\r\n",
			want: [][]string{
				{"X", "CNS", "TNS", "NS"},
				{"CNS", "X", "GNS", "DR"},
				{"TNS", "GNS", "X", "U"},
				{"NS", "DR", "U", "X"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.text)
			if tt.file != "" {
				in = readTestdata(t, "nvsmi/"+tt.file)
			}
			got, err := ParseP2PMatrix(in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseP2PMatrixRefuses(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		// topo -m path types are not P2P statuses: the mistake this guards against.
		{"path type", "\tGPU0\tGPU1\nGPU0\tX\tPIX\nGPU1\tSYS\tX\n", `:2:8: unknown P2P status "PIX"`},
		{"short row", "\tGPU0\tGPU1\nGPU0\tX\nGPU1\tOK\tX\n", ":2:7: row GPU0 has 1 cells, header has 2"},
		{"duplicate row", "\tGPU0\tGPU1\nGPU0\tX\tOK\nGPU0\tX\tOK\n", ":3:1: duplicate row GPU0"},
		{"missing row", "\tGPU0\tGPU1\nGPU0\tX\tOK\n", "no row for GPU1"},
		{"no header", "GPU0\tX\tOK\nGPU1\tOK\tX\n", ":1:1: matrix row GPU0 before any header"},
		{"X off diagonal", "\tGPU0\tGPU1\nGPU0\tOK\tX\nGPU1\tOK\tX\n", `:2:6: "OK" at GPU0/GPU0`},
		{"unknown row", "\tGPU0\nGPU7\tX\n", `row "GPU7" is not a header column`},
		{"odd header", "\tGPU0\tNIC0\n", `header cell "NIC0" is not a GPU name`},
		{"nothing", "", "no header line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseP2PMatrix([]byte(tt.text))
			if !errors.Is(err, ErrBadCapture) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrBadCapture containing %q", err, tt.want)
			}
		})
	}
}

func FuzzParseQueryGPU(f *testing.F) {
	for _, name := range []string{"h200-2gpu-query.csv", "mixed-unknowns.csv", "h200-2gpu-query-other-fields.txt"} {
		if b, err := os.ReadFile(filepath.Join("testdata", "nvsmi", name)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		gpus, err := ParseQueryGPU(data)
		if err != nil && !errors.Is(err, ErrBadCapture) {
			t.Fatalf("error %v does not wrap ErrBadCapture", err)
		}
		for _, g := range gpus {
			if g.NUMANode != -1 {
				t.Fatalf("NUMANode %d, want -1", g.NUMANode)
			}
		}
	})
}

func FuzzParseP2PMatrix(f *testing.F) {
	files, _ := filepath.Glob("testdata/nvsmi/*p2p*.txt")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseP2PMatrix(data)
		if err != nil {
			if !errors.Is(err, ErrBadCapture) {
				t.Fatalf("error %v does not wrap ErrBadCapture", err)
			}
			return
		}
		for i, row := range m {
			if len(row) != len(m) || row[i] != "X" {
				t.Fatalf("accepted a malformed matrix %q", m)
			}
		}
	})
}
