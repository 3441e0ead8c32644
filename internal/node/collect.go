package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/preflight"
)

// RunCollect answers `gorun _collect REQUEST` on a node: this machine's
// facts, as JSON on stdout. The request is preflight.Request as JSON; its
// budget, when set, bounds the whole collection.
func RunCollect(ctx context.Context, arg string, stdout io.Writer) error {
	return runCollect(ctx, arg, stdout, nvml.New())
}

func runCollect(ctx context.Context, arg string, stdout io.Writer, lib nvml.Interface) error {
	var req preflight.Request
	if err := json.Unmarshal([]byte(arg), &req); err != nil {
		return fmt.Errorf("%s: bad request: %w", wire.CollectCommand, err)
	}
	if b := req.Budget(); b > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b)
		defer cancel()
	}
	return json.NewEncoder(stdout).Encode(collect(ctx, req, lib))
}

// Collect gathers this machine's facts, NVML's among them: the library
// handle is made here, for this call.
func Collect(ctx context.Context, req preflight.Request) preflight.Facts {
	return collect(ctx, req, nvml.New())
}

func collect(ctx context.Context, req preflight.Request, lib nvml.Interface) preflight.Facts {
	src := preflight.Sources{
		NVML:       lib,
		Root:       "/",
		Run:        runCommand,
		Environ:    os.Environ(),
		Now:        time.Now,
		Interfaces: preflight.HostInterfaces,
		Route:      preflight.HostRoute,
		Torch: func(ctx context.Context) preflight.TorchFacts {
			python, guessed := torchrunPython(req.Torchrun)
			var tf preflight.TorchFacts
			if at := req.TorchAt; at != nil {
				tf = preflight.ReadTorchAt(ctx, python, *at, statFile, runArgv, os.ReadFile, listDir)
			} else {
				tf = preflight.FindTorch(ctx, python, runArgv, os.ReadFile)
			}
			tf.Guessed = guessed
			_, tf.TorchrunMissing = torchrunProgram(req.Torchrun)
			return tf
		},
	}
	if req.SkipTorch {
		src.Torch = nil // no interpreter started: the head does not ask (--preflight off)
	}
	facts := preflight.Collect(ctx, src, req.Options())
	facts.Gorun, _ = os.Executable()
	if req.Bandwidth != "" && ctx.Err() == nil {
		python := facts.Torch.Python
		if python == "" {
			python, _ = torchrunPython(req.Torchrun)
		}
		bw := preflight.MeasureNode(ctx, preflight.BandwidthOptions{Python: python, Environ: os.Environ()})
		facts.Bandwidth = &bw
	}
	return facts
}

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).Output()
}

func runArgv(ctx context.Context, argv []string) ([]byte, error) {
	return runCommand(ctx, argv[0], argv[1:]...)
}

func statFile(path string) error {
	_, err := os.Stat(path)
	return err
}

// listDir is the names in a folder.
func listDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, err
}
