package preflight

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/testenv"
)

func TestParseTorchVersionFile(t *testing.T) {
	tests := []struct {
		file string
		want TorchVersionFile
	}{
		{"cu130-version.py", TorchVersionFile{Version: "2.11.0+cu130", CUDA: "13.0", GitVersion: "70d99e998b2a8e5b4ab7fd1ab3eb5b3bd1e8e9b3"}},
		{"rocm-version.py", TorchVersionFile{Version: "2.5.1+rocm6.2", HIP: "6.2.41133-dd7f95766", GitVersion: "a8d6afb511a69687bbb2b7e88a3cf67917e1697e"}},
		// Debian's python3-torch: a CPU build.
		{"debian-1.13-version.py", TorchVersionFile{Version: "1.13.0a0", GitVersion: "Unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseTorchVersionFile(readTestdata(t, "torch/"+tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := ParseTorchVersionFile([]byte("cuda = '12.8'\n__version__ = None\n")); err == nil {
		t.Error("a file without a __version__ string was accepted")
	}
}

func TestFindTorch(t *testing.T) {
	files := map[string]string{
		"/venv/lib/python3.12/site-packages/torch/version.py": string(readTestdata(t, "torch/cu130-version.py")),
	}
	readFile := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	tests := []struct {
		name string
		out  string
		err  error
		want TorchFacts
	}{
		{
			name: "pip wheel with nccl",
			out:  "/venv/lib/python3.12/site-packages/torch\nnvidia_nccl_cu13-2.28.9.dist-info\n",
			want: TorchFacts{Python: "/venv/bin/python", Dir: "/venv/lib/python3.12/site-packages/torch", Found: true, Version: "2.11.0+cu130", CUDA: "13.0", NCCL: "2.28.9"},
		},
		{
			name: "nccl linked in",
			out:  "/venv/lib/python3.12/site-packages/torch\n",
			want: TorchFacts{Python: "/venv/bin/python", Dir: "/venv/lib/python3.12/site-packages/torch", Found: true, Version: "2.11.0+cu130", CUDA: "13.0"},
		},
		{
			name: "not installed",
			out:  "\n",
			want: TorchFacts{Python: "/venv/bin/python", Err: "torch is not installed for /venv/bin/python"},
		},
		{
			name: "no version file",
			out:  "/elsewhere/torch\n",
			want: TorchFacts{Python: "/venv/bin/python", Dir: "/elsewhere/torch", Err: "read /elsewhere/torch/version.py: file does not exist"},
		},
		{
			name: "python fails",
			out:  "Traceback (most recent call last):\nPermissionError: [Errno 13] Permission denied: '/venv'\n",
			err:  errors.New("exit status 1"),
			want: TorchFacts{Python: "/venv/bin/python", Err: "locate torch with /venv/bin/python: exit status 1: PermissionError: [Errno 13] Permission denied: '/venv'"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var argv []string
			run := func(_ context.Context, a []string) ([]byte, error) {
				argv = a
				return []byte(tt.out), tt.err
			}
			got := FindTorch(context.Background(), "/venv/bin/python", run, readFile)
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if !slices.Equal(argv, TorchLocateArgv("/venv/bin/python")) {
				t.Errorf("ran %q", argv)
			}
		})
	}
}

// TestFindTorchRealPython runs the locate script with the machine's python
// and checks it finds torch without importing it.
func TestFindTorchRealPython(t *testing.T) {
	const python = "/usr/bin/python3"
	_, err := os.Stat(python)
	testenv.Need(t, err == nil, "no /usr/bin/python3")
	run := func(ctx context.Context, argv []string) ([]byte, error) {
		return exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	}
	// Compare with the version file the locate script points at.
	got := FindTorch(context.Background(), python, run, os.ReadFile)
	testenv.Need(t, got.Err != "torch is not installed for "+python, "torch is not installed for "+python+" (Debian: python3-torch; .ci/run installs it)")
	if !got.Found || got.Err != "" {
		t.Fatalf("FindTorch = %+v", got)
	}
	out, err := run(context.Background(), TorchLocateArgv(python))
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.SplitN(string(out), "\n", 2)[0]
	src, err := os.ReadFile(filepath.Join(dir, "version.py"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseTorchVersionFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != v.Version || got.CUDA != v.CUDA || got.Python != python || got.Dir != dir {
		t.Errorf("FindTorch = %+v, version file says %+v (in %s)", got, v, dir)
	}
	// Read again where it was found, as a recheck does: the same facts,
	// and no interpreter started.
	noRun := func(context.Context, []string) ([]byte, error) {
		t.Error("ReadTorchAt started the interpreter")
		return nil, errors.New("not run")
	}
	stat := func(p string) error { _, err := os.Stat(p); return err }
	list := func(d string) ([]string, error) {
		entries, err := os.ReadDir(d)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names, err
	}
	if again := ReadTorchAt(context.Background(), python, TorchAt{Python: got.Python, Dir: got.Dir}, stat, noRun, os.ReadFile, list); again != got {
		t.Errorf("ReadTorchAt = %+v, FindTorch found %+v", again, got)
	}
}

// TestReadTorchAt: a recheck reads torch where an earlier check found it,
// without the interpreter, and finds a torch gone from there out; with
// another interpreter now it looks for torch as FindTorch does.
func TestReadTorchAt(t *testing.T) {
	const python, dir = "/venv/bin/python", "/venv/lib/python3.12/site-packages/torch"
	files := map[string]string{dir + "/version.py": string(readTestdata(t, "torch/cu130-version.py"))}
	readFile := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	exists := map[string]bool{python: true, "/other/bin/python": true}
	stat := func(p string) error {
		if exists[p] {
			return nil
		}
		return os.ErrNotExist
	}
	list := func(d string) ([]string, error) {
		if d == path.Dir(dir) {
			return []string{"numpy", "nvidia_nccl_cu13-2.28.9.dist-info", "torch"}, nil
		}
		return nil, os.ErrNotExist
	}
	tests := []struct {
		name   string
		python string
		at     TorchAt
		ran    bool
		want   TorchFacts
	}{
		{"where it was", python, TorchAt{python, dir}, false,
			TorchFacts{Python: python, Dir: dir, Found: true, Version: "2.11.0+cu130", CUDA: "13.0", NCCL: "2.28.9"}},
		{"gone from there", python, TorchAt{python, "/mnt/gone/torch"}, false,
			TorchFacts{Python: python, Dir: "/mnt/gone/torch", Err: "read /mnt/gone/torch/version.py: file does not exist"}},
		{"interpreter gone", "/venv2/bin/python", TorchAt{"/venv2/bin/python", dir}, false,
			TorchFacts{Python: "/venv2/bin/python", Err: "locate torch with /venv2/bin/python: file does not exist"}},
		{"another interpreter now", "/other/bin/python", TorchAt{python, dir}, true,
			TorchFacts{Python: "/other/bin/python", Err: "torch is not installed for /other/bin/python"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran := false
			run := func(context.Context, []string) ([]byte, error) { ran = true; return []byte("\n"), nil }
			got := ReadTorchAt(context.Background(), tt.python, tt.at, stat, run, readFile, list)
			if got != tt.want || ran != tt.ran {
				t.Errorf("got  %+v (interpreter started: %v)\nwant %+v (%v)", got, ran, tt.want, tt.ran)
			}
		})
	}
}

// TestTorchLocateDoesNotImport plants a torch package whose __init__ fails
// loudly and checks the locate script still answers.
func TestTorchLocateDoesNotImport(t *testing.T) {
	python, err := exec.LookPath("python3")
	testenv.Need(t, err == nil, "no python3 on the PATH")
	dir := t.TempDir()
	pkg := filepath.Join(dir, "torch")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	torchMust(t, os.WriteFile(filepath.Join(pkg, "__init__.py"), []byte("raise SystemExit('torch was imported')\n"), 0o644))
	torchMust(t, os.WriteFile(filepath.Join(pkg, "version.py"), []byte("__version__ = '9.9.9+cu999'\ncuda = '99.9'\n"), 0o644))
	torchMust(t, os.MkdirAll(filepath.Join(dir, "nvidia_nccl_cu12-2.27.3.dist-info"), 0o755))
	run := func(ctx context.Context, argv []string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		return cmd.CombinedOutput()
	}
	got := FindTorch(context.Background(), python, run, os.ReadFile)
	want := TorchFacts{Python: python, Dir: pkg, Found: true, Version: "9.9.9+cu999", CUDA: "99.9", NCCL: "2.27.3"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestTorchrunPython(t *testing.T) {
	tests := []struct{ file, want string }{
		{"torchrun-system", "/usr/bin/python3"},
		{"torchrun-env", "python3"},
		{"torchrun-env-s", "python3.11"},
		{"torchrun-pip-long", "/very/long/path/to/a/virtual/env/that/exceeds/the/shebang/limit/of/the/kernel/bin/python3.12"},
		{"torchrun-pip-spaces", "/opt/my envs/py 3/bin/python"},
		{"torchrun-no-shebang", ""},
		{"missing", ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if got := TorchrunPython(filepath.Join("testdata", "torch", tt.file), os.ReadFile); got != tt.want {
				t.Errorf("TorchrunPython = %q, want %q", got, tt.want)
			}
		})
	}
}

func torchMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
