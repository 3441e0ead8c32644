package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gorun/gorun/internal/agent"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/telemetry"
)

// noNVML is a machine without the NVML library.
func noNVML() *mock.Interface {
	return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
}

// fakeTorchrun writes a torchrun script whose #! line names a Python that
// is a shell script failing at once (no torch there, no bandwidth run), and
// returns both paths.
func fakeTorchrun(t *testing.T) (torchrun, python string) {
	t.Helper()
	dir := t.TempDir()
	python = filepath.Join(dir, "venv", "bin", "python3.11")
	if err := os.MkdirAll(filepath.Dir(python), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(python, []byte("#!/bin/sh\necho 'no torch here'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	torchrun = filepath.Join(dir, "venv", "bin", "torchrun")
	script := "#!" + python + "\n# -*- coding: utf-8 -*-\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n"
	if err := os.WriteFile(torchrun, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return torchrun, python
}

func TestTorchrunPython(t *testing.T) {
	torchrun, python := fakeTorchrun(t)
	bin := filepath.Dir(torchrun)
	envDir := t.TempDir()
	envTorchrun := filepath.Join(envDir, "torchrun")
	if err := os.WriteFile(envTorchrun, []byte("#!/usr/bin/env python3.11\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, torchrun, want string
		guessed                    bool
	}{
		{"a path, with options", "", torchrun + " --nproc-per-node=2", python, false},
		{"on the PATH", bin, "torchrun", python, false},
		{"the default name on the PATH", bin, "", python, false},
		{"#!/usr/bin/env, found on the PATH", bin + ":" + envDir, envTorchrun, python, false},
		{"no torchrun: python3", t.TempDir(), "", "python3", true},
		{"not a script: python3", "", "/dev/null", "python3", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PATH", tt.path)
			if got, guessed := torchrunPython(tt.torchrun); got != tt.want || guessed != tt.guessed {
				t.Errorf("torchrunPython(%q) = %q, %v; want %q, %v", tt.torchrun, got, guessed, tt.want, tt.guessed)
			}
		})
	}
}

func TestRunCollectBadRequest(t *testing.T) {
	for _, arg := range []string{"", "{", `{"torchrun": 3}`} {
		var out bytes.Buffer
		err := RunCollect(t.Context(), arg, &out)
		if err == nil || !strings.HasPrefix(err.Error(), wire.CollectCommand+": bad request: ") {
			t.Errorf("RunCollect(%q) = %v, want a bad request", arg, err)
		}
		if out.Len() != 0 {
			t.Errorf("RunCollect(%q) printed %q", arg, out.String())
		}
	}
}

// collectFacts runs `gorun _collect` on req without NVML and reads its facts.
func collectFacts(t *testing.T, req preflight.Request) preflight.Facts {
	t.Helper()
	arg, _ := json.Marshal(req)
	var out bytes.Buffer
	if err := runCollect(t.Context(), string(arg), &out, noNVML()); err != nil {
		t.Fatal(err)
	}
	var f preflight.Facts
	if err := json.Unmarshal(out.Bytes(), &f); err != nil {
		t.Fatalf("not JSON facts: %v\n%s", err, out.Bytes())
	}
	return f
}

// TestRunCollect: the node's facts come back as JSON, with NVML's failure
// explained, torch looked for with torchrun's own Python, gorun's own path,
// and, when asked, a bandwidth run with that Python.
func TestRunCollect(t *testing.T) {
	torchrun, python := fakeTorchrun(t)
	for _, bandwidth := range []string{"", preflight.BandwidthNode} {
		t.Run("bandwidth="+bandwidth, func(t *testing.T) {
			f := collectFacts(t, preflight.Request{Torchrun: torchrun, BudgetSeconds: 30, Bandwidth: bandwidth})
			if f.Driver.NVMLErrorCode != int(nvml.ERROR_LIBRARY_NOT_FOUND) {
				t.Errorf("NVML error %d (%q), want ERROR_LIBRARY_NOT_FOUND", f.Driver.NVMLErrorCode, f.Driver.NVMLError)
			}
			if f.Torch.Python != python || f.Torch.Found || !strings.Contains(f.Torch.Err, "no torch here") {
				t.Errorf("torch = %+v, want not found with %s", f.Torch, python)
			}
			if self, _ := os.Executable(); f.Gorun != self {
				t.Errorf("gorun = %q, want %q", f.Gorun, self)
			}
			switch {
			case bandwidth == "" && f.Bandwidth != nil:
				t.Errorf("bandwidth %+v, not asked for", f.Bandwidth)
			case bandwidth != "" && (f.Bandwidth == nil || f.Bandwidth.Python != python || len(f.Bandwidth.Errors) == 0):
				t.Errorf("bandwidth %+v, want a failed run with %s", f.Bandwidth, python)
			}
		})
	}
}

// TestRunCollectSkipTorch: with the head knowing the node's torch, the
// collector starts no interpreter and reports none.
func TestRunCollectSkipTorch(t *testing.T) {
	torchrun, _ := fakeTorchrun(t)
	f := collectFacts(t, preflight.Request{Torchrun: torchrun, BudgetSeconds: 30, SkipTorch: true})
	if f.Torch != (preflight.TorchFacts{}) {
		t.Errorf("torch = %+v: the interpreter was started though the head knows it", f.Torch)
	}
}

// TestCollectCancelled: a collection whose context has ended skips the
// bandwidth run and still returns what it has.
func TestCollectCancelled(t *testing.T) {
	torchrun, _ := fakeTorchrun(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f := Collect(ctx, preflight.Request{Torchrun: torchrun, Bandwidth: preflight.BandwidthNode})
	if f.Bandwidth != nil {
		t.Errorf("bandwidth %+v after the context ended", f.Bandwidth)
	}
}

func TestRunBandwidth(t *testing.T) {
	var out bytes.Buffer
	if err := RunBandwidth(t.Context(), "{", &out); err == nil || !strings.HasPrefix(err.Error(), wire.BandwidthCommand+": bad request: ") {
		t.Errorf("RunBandwidth of a bad request: %v", err)
	}
	torchrun, python := fakeTorchrun(t)
	req, _ := json.Marshal(preflight.PairRequest{Torchrun: torchrun, Rank: 1, Master: "127.0.0.1:1", BudgetSeconds: 1, LimitSeconds: 5})
	out.Reset()
	if err := RunBandwidth(t.Context(), string(req), &out); err != nil {
		t.Fatal(err)
	}
	var bw preflight.BandwidthFacts
	if err := json.Unmarshal(out.Bytes(), &bw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.Bytes())
	}
	if bw.Python != python || len(bw.Errors) == 0 {
		t.Errorf("bandwidth %+v, want a failed run with %s", bw, python)
	}
}

// TestSidecarBadSettings: settings the sidecar cannot read turn telemetry
// off quietly: no NVML, no frame.
func TestSidecarBadSettings(t *testing.T) {
	for _, settings := range []string{"", "{", `{"interval": "soon"}`, `[1]`} {
		sidecar(t.Context(), json.RawMessage(settings), func(b []byte) { t.Errorf("%q: sent %s", settings, b) },
			func(...nvml.LibraryOption) nvml.Interface { t.Errorf("%q: NVML loaded", settings); return noNVML() })
		GPUSidecar(t.Context(), json.RawMessage(settings), func(b []byte) { t.Errorf("%q: GPUSidecar sent %s", settings, b) })
	}
}

// TestSidecarNoNVML: on a node without NVML the sidecar says why in one
// notice and returns.
func TestSidecarNoNVML(t *testing.T) {
	var sent [][]byte
	sidecar(t.Context(), json.RawMessage(`{"interval": 1000000000}`), func(b []byte) { sent = append(sent, b) },
		func(...nvml.LibraryOption) nvml.Interface { return noNVML() })
	if len(sent) != 1 {
		t.Fatalf("sent %d frames, want 1 notice", len(sent))
	}
	var f telemetry.Frame
	if err := json.Unmarshal(sent[0], &f); err != nil || f.Notice == "" || f.Sample != nil {
		t.Errorf("frame %s (%v), want a notice", sent[0], err)
	}
}

// TestServeAgent: the agent is sshexec's, with the sidecar; with no job on
// stdin it refuses. It runs in a child, since an agent makes its process a
// subreaper.
func TestServeAgent(t *testing.T) {
	if os.Getenv("GORUN_TEST_NODE_AGENT") == "1" {
		os.Exit(ServeAgent(context.Background(), strings.NewReader(""), os.Stdout, os.Stderr))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeAgent$")
	cmd.Env = append(os.Environ(), "GORUN_TEST_NODE_AGENT=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != agent.ExitBadSpec {
		t.Errorf("agent with no job: %v, want exit %d; stderr %q", err, agent.ExitBadSpec, stderr.String())
	}
}

// TestCollectTorchAt: a recheck's request that says where torch was found
// reads it there, without the interpreter (this one fails if started);
// without it the interpreter is asked, and fails.
func TestCollectTorchAt(t *testing.T) {
	torchrun, python := fakeTorchrun(t)
	site := filepath.Join(t.TempDir(), "site-packages")
	dir := filepath.Join(site, "torch")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "version.py"), []byte("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(site, "nvidia_nccl_cu13-2.28.9.dist-info"), 0o755); err != nil {
		t.Fatal(err)
	}
	at := &preflight.TorchAt{Python: python, Dir: dir}
	got := collect(t.Context(), preflight.Request{Torchrun: torchrun, TorchAt: at}, noNVML()).Torch
	want := preflight.TorchFacts{Python: python, Dir: dir, Found: true, Version: "2.11.0+cu130", CUDA: "13.0", NCCL: "2.28.9"}
	if got != want {
		t.Errorf("read where found: %+v\nwant %+v", got, want)
	}
	if got := collect(t.Context(), preflight.Request{Torchrun: torchrun}, noNVML()).Torch; got.Found || !strings.Contains(got.Err, "no torch here") {
		t.Errorf("looked for: %+v, want the interpreter's failure", got)
	}
	os.Remove(filepath.Join(dir, "version.py")) // torch gone from there since
	if got := collect(t.Context(), preflight.Request{Torchrun: torchrun, TorchAt: at}, noNVML()).Torch; got.Found || !strings.HasPrefix(got.Err, "read "+dir+"/version.py: ") {
		t.Errorf("gone since: %+v, want its read's failure", got)
	}
}
