package preflight

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestCollectRealMachine collects this machine's facts through the real
// NVML and writes them, with the findings, to $GORUN_OUT. It runs only with
// GORUN_REAL_GPU=1, on a GPU machine.
func TestCollectRealMachine(t *testing.T) {
	if os.Getenv("GORUN_REAL_GPU") != "1" {
		t.Skip("set GORUN_REAL_GPU=1 on a GPU machine")
	}
	outDir := os.Getenv("GORUN_OUT")
	if outDir == "" {
		outDir = t.TempDir()
	}
	run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, name, args...).Output()
	}
	src := Sources{
		NVML: nvml.New(), Root: "/", Run: run, Environ: os.Environ(), Now: time.Now,
		Interfaces: HostInterfaces, Route: HostRoute,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	f := Collect(ctx, src, CollectOptions{Host: "real", RouteTarget: "127.0.0.1"})
	t.Logf("collect took %v", time.Since(start))

	// The same node through the nvidia-smi fallback, to compare.
	fb := Collect(ctx, Sources{Root: "/", Run: run, Environ: os.Environ(), Now: time.Now}, CollectOptions{Host: "real-smi"})

	want := Want{NProc: "gpu", GPUsRequested: true}
	nodes := []NodeReport{{Host: f.Host, Facts: f, Findings: Check(f, want)}, {Host: fb.Host, Facts: fb, Findings: Check(fb, want)}}
	rep := NewReport(nodes, CheckAcross(nodes))
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outDir, "report.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Create(filepath.Join(outDir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := rep.WriteText(fh); err != nil {
		t.Fatal(err)
	}
	if f.Source != "nvml" {
		t.Errorf("source %q, NVML error %q", f.Source, f.Driver.NVMLError)
	}
	if len(f.GPUs) == 0 {
		t.Error("no GPUs collected")
	}
}
