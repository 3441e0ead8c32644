package preflight

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLintScript(t *testing.T) {
	tests := []struct {
		file     string
		want     []string // "severity id", in order
		evidence []string // substrings of the joined evidence
	}{
		{file: "good_ddp.py"},
		{
			file: "bad_everything.py",
			want: []string{"warn script.find-unused-parameters", "warn script.gloo-cuda", "warn script.cuda-visible-devices"},
			evidence: []string{
				"bad_everything.py:12: find_unused_parameters=True)",
				`bad_everything.py:9: dist.init_process_group("gloo"); bad_everything.py:10: model = torch.nn.Linear(10, 10).to("cuda")`,
				`bad_everything.py:6: os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"; bad_everything.py:7: os.environ.setdefault('CUDA_VISIBLE_DEVICES', '0')`,
			},
		},
		{
			// Comparing CUDA_VISIBLE_DEVICES is reading it, not setting it.
			file:     "nccl_no_device.py",
			want:     []string{"warn script.no-set-device"},
			evidence: []string{`nccl_no_device.py:4: dist.init_process_group(backend="nccl")`},
		},
		{file: "nccl_device_from_rank.py"},
		{file: "accelerate_script.py"},
		{
			file:     "default_backend.py",
			want:     []string{"warn script.cuda-visible-devices", "warn script.no-set-device"},
			evidence: []string{`default_backend.py:3: os.putenv("CUDA_VISIBLE_DEVICES", "3")`, "default_backend.py:2: dist.init_process_group()"},
		},
		{
			file:     "gloo_crlf.py",
			want:     []string{"warn script.gloo-cuda"},
			evidence: []string{`gloo_crlf.py:2: dist.init_process_group(backend="gloo"); gloo_crlf.py:3: x = torch.zeros(3).cuda()`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got := LintScript(tt.file, readTestdata(t, filepath.Join("lint", tt.file)))
			if ids := findingIDs(got); !slices.Equal(ids, tt.want) {
				t.Fatalf("findings %q, want %q\n%+v", ids, tt.want, got)
			}
			var ev []string
			for _, f := range got {
				if f.Message == "" || f.Evidence == "" || f.Remedy == "" {
					t.Errorf("incomplete finding %+v", f)
				}
				ev = append(ev, f.Evidence)
			}
			all := strings.Join(ev, "\n")
			for _, s := range tt.evidence {
				if !strings.Contains(all, s) {
					t.Errorf("evidence lacks %q:\n%s", s, all)
				}
			}
		})
	}
}

func TestPythonCode(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"comment", "x = 1 # c\n", "x = 1    \n"},
		{"prose string", `print("a = b") or f("gloo")`, `print("     ") or f("gloo")`},
		{"hash in string", `s = "a#b"  # c`, `s = "a#b"     `},
		{"docstring", "'''doc\nmore'''\nx", "      \n       \nx"},
		{"escaped quote", `s = 'it\'s' # x`, `s = 'it\'s'    `},
		{"unterminated string", "s = 'abc\nx # y", "s = 'abc\nx    "},
		{"unterminated docstring", `"""abc`, "      "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pythonCode(tt.in); got != tt.want {
				t.Errorf("pythonCode(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := pythonCode(tt.in); strings.Count(got, "\n") != strings.Count(tt.in, "\n") {
				t.Errorf("line count changed: %q", got)
			}
		})
	}
}

func FuzzLintScript(f *testing.F) {
	files, _ := filepath.Glob("testdata/lint/*.py")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		code := pythonCode(string(src))
		if strings.Count(code, "\n") != strings.Count(string(src), "\n") {
			t.Fatal("pythonCode changed the line count")
		}
		for _, fd := range LintScript("fuzz.py", src) {
			if fd.Severity != SeverityWarn {
				t.Fatalf("script lint produced %s", fd.Severity)
			}
		}
	})
}
