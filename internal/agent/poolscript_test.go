package agent

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/wire"
)

// TestScriptScan: what the fork server reads of a worker's script before
// it imports (warm.py _scan): each thing a pooled worker would not see as
// a cold one does makes its workers start cold, with the line; what it
// would see, or what comes after the import, does not.
func TestScriptScan(t *testing.T) {
	needPython(t)
	const python = "/usr/bin/python3"
	for _, tc := range []struct {
		name, script, cold string // cold: a part of the reason; "": no reason
	}{
		{"plain", "import os, sys\nimport torch\nos.environ['OMP_NUM_THREADS'] = '2'\n", ""},
		{"set before", "import os\nos.environ['OMP_NUM_THREADS'] = '2'\nimport torch\n", "s.py:2 sets OMP_NUM_THREADS before it imports torch"},
		{"not read at import", "import os\nos.environ['NCCL_DEBUG'] = 'INFO'\nimport torch\n", ""},
		{"alias", "import os as o\no.environ.setdefault('MKL_NUM_THREADS', '1')\nimport torch\n", "s.py:2 sets MKL_NUM_THREADS"},
		{"from os import environ", "from os import environ as E\nE.update({'A': '1', 'LD_PRELOAD': 'x'})\nimport torch\n", "sets LD_PRELOAD"},
		{"update by keyword", "import os\nos.environ.update(CUDA_VISIBLE_DEVICES='0')\nimport torch\n", "sets CUDA_VISIBLE_DEVICES"},
		{"name computed", "import os\nk = 'OMP'\nos.environ[k + '_NUM_THREADS'] = '2'\nimport torch\n", "names as it runs"},
		{"putenv", "import os\nos.putenv('PYTHONHASHSEED', '1')\nimport torch\n", "sets PYTHONHASHSEED"},
		{"deleted", "import os\ndel os.environ['TORCH_LOGS']\nimport torch\n", "sets TORCH_LOGS"},
		{"sys.path", "import sys\nsys.path.insert(0, '/opt/x')\nimport torch\n", "changes sys.path"},
		{"sys.path assigned", "import sys\nsys.path = ['/opt/x'] + sys.path\nimport torch\n", "changes sys.path"},
		{"ctypes", "import ctypes\nctypes.CDLL('libgomp.so.1')\nimport torch\n", "loads a library"},
		{"dlopen flags", "import sys\nsys.setdlopenflags(258)\nimport torch\n", "sys.setdlopenflags"},
		{"warnings", "import warnings\nwarnings.filterwarnings('error')\nimport torch\n", "sets warnings filters"},
		{"warnings caught", "import warnings\nwith warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n    import json\nimport torch\n", ""},
		{"atexit decorator", "import atexit\n@atexit.register\ndef bye():\n    pass\nimport torch\n", "s.py:2 registers an atexit handler"},
		{"in a function it calls", "import os\ndef setup():\n    os.environ['OMP_NUM_THREADS'] = '4'\nsetup()\nimport torch\n", "s.py:3 sets OMP_NUM_THREADS"},
		{"a function it does not call", "import os\ndef later():\n    os.environ['OMP_NUM_THREADS'] = '4'\nimport torch\nlater()\n", ""},
		{"import inside main", "import os\ndef main():\n    import torch\nif __name__ == '__main__':\n    main()\n    os.environ['OMP_NUM_THREADS'] = '4'\n", ""},
		{"before main's import", "import os\ndef main():\n    os.environ['KMP_AFFINITY'] = 'x'\n    import torch\nif __name__ == '__main__':\n    main()\n", "s.py:3 sets KMP_AFFINITY"},
		{"exec", "exec(open('cfg.py').read())\nimport torch\n", "runs code it builds"},
		{"after a from-import", "from torch import nn\nimport os\nos.environ['OMP_NUM_THREADS'] = '1'\n", ""},
		{"importlib", "import importlib, os\nimportlib.import_module('torch')\nos.environ['OMP_NUM_THREADS'] = '1'\n", ""},
		{"syntax error", "import torch\ndef broken(:\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "s.py"), []byte(tc.script), 0o644); err != nil {
				t.Fatal(err)
			}
			got := scanScript(t, python, dir, "s.py")
			switch {
			case tc.cold == "" && got.Cold != "":
				t.Errorf("cold: %q, want none", got.Cold)
			case tc.cold != "" && !strings.Contains(got.Cold, tc.cold):
				t.Errorf("cold: %q, want one with %q", got.Cold, tc.cold)
			}
			if got.Learned == "" && tc.name != "syntax error" {
				t.Errorf("no file to learn in")
			}
		})
	}
}

// scanScript runs warm.py's scan of script in dir, as the fork server of
// a pool importing torch does.
func scanScript(t *testing.T, python, dir, script string) scriptVerdict {
	t.Helper()
	shim := filepath.Join(t.TempDir(), "warm.py") // it removes itself and its folder
	if err := os.WriteFile(shim, []byte(warmPy), 0o600); err != nil {
		t.Fatal(err)
	}
	prefixes, names := importTimeRules()
	settings, _ := json.Marshal(map[string]any{"script": map[string]any{"target": script}, "modules": []string{"torch"},
		"import_time": map[string]any{"prefixes": prefixes, "names": names}})
	cmd := exec.Command(python, shim, "scan", string(settings))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir())
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	var v scriptVerdict
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("scan said %q: %v", b, err)
	}
	return v
}

// TestLearnedOncePerPool: a pool reads what an earlier pooled worker
// changed at its first claim only, so a rank whose take comes after its
// node's first rank already changed something starts as that rank did;
// a later pool (the next attempt) reads it anew.
func TestLearnedOncePerPool(t *testing.T) {
	file := filepath.Join(t.TempDir(), "learned")
	v := scriptVerdict{Target: "train.py", Learned: file}
	take := wire.PoolTake{Target: "train.py"}
	p := &pool{}
	if why := v.cold(take, p.learnedOnce); why != "" {
		t.Fatalf("first take, nothing learned: cold (%s)", why)
	}
	if err := os.WriteFile(file, []byte("set OMP_NUM_THREADS at train.py:3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if why := v.cold(take, p.learnedOnce); why != "" {
		t.Errorf("a later take of the same pool: cold (%s), want pooled as the first", why)
	}
	next := &pool{}
	want := "an earlier pooled worker of this script set OMP_NUM_THREADS at train.py:3"
	if why := v.cold(take, next.learnedOnce); why != want {
		t.Errorf("the next pool: %q, want %q", why, want)
	}
}

// needPython skips a test that runs the pool's Python where there is none.
func needPython(t *testing.T) {
	t.Helper()
	_, err := os.Stat("/usr/bin/python3")
	testenv.Need(t, err == nil, "/usr/bin/python3 is missing")
}
