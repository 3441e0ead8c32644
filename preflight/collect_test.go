package preflight

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// smiCaptures answers nvidia-smi calls from the real H200 2-GPU captures.
func smiCaptures(t testing.TB) CommandRunner {
	ref := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "real", "h200-2gpu", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		if name != "nvidia-smi" {
			return nil, fmt.Errorf("unexpected command %s", name)
		}
		switch strings.Join(args, " ") {
		case strings.Join(QueryGPUArgs(), " "):
			return ref("nvsmi_query.txt"), nil
		case "":
			return []byte("| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |\n"), nil
		case "topo -m":
			return ref("nvsmi_topo_m.txt"), nil
		case "topo -p2p r", "topo -p2p w", "topo -p2p n":
			return ref("nvsmi_p2p_r.txt"), nil
		}
		return nil, fmt.Errorf("unexpected nvidia-smi %v", args)
	}
}

func TestCollect(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	script := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(script, []byte("print('hi')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("nvml on the H200 tree", func(t *testing.T) {
		lib, devs := fakeDGX(2)
		lib.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS }
		lib.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 13000, nvml.SUCCESS }
		for i, d := range devs {
			d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{Bus: 0, Device: uint32(6 + i)}, nvml.SUCCESS }
		}
		f := Collect(context.Background(), Sources{NVML: lib, Root: loadRoot(t, "h200-2gpu"), Now: now,
			Environ: []string{"NCCL_NVLS_ENABLE=0", "SECRET=x"},
			Torch:   func(context.Context) TorchFacts { return TorchFacts{Found: true, CUDA: "13.0"} }},
			CollectOptions{Host: "h", Script: script})
		if f.Source != "nvml" || len(f.GPUs) != 2 || f.GPUs[1].BusID != "0000:00:07.0" || f.GPUs[1].LocalCPUs != "0-31" || f.GPUs[1].NUMANode != -1 {
			t.Fatalf("facts = %+v", f)
		}
		if f.Host != "h" || !f.Time.Equal(now()) || f.Env["SECRET"] != "" || f.Env["NCCL_NVLS_ENABLE"] != "0" || !f.Torch.Found {
			t.Errorf("host/time/env/torch = %q %v %v %+v", f.Host, f.Time, f.Env, f.Torch)
		}
		if f.ScriptSHA256 != "caf026f25d7140209f98072605307a438914b9ce6f3c14b23d15d9667241de52" {
			t.Errorf("script hash %q", f.ScriptSHA256)
		}
		if worst(Check(f, Want{NProc: "2", GPUsRequested: true})) == SeverityFail {
			t.Errorf("fail findings:\n%s", dumpFindings(Check(f, Want{NProc: "2", GPUsRequested: true})))
		}
	})
	t.Run("nvidia-smi fallback when NVML is missing", func(t *testing.T) {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
		f := Collect(context.Background(), Sources{NVML: lib, Root: loadRoot(t, "h200-2gpu"), Run: smiCaptures(t)}, CollectOptions{})
		if f.Source != "nvidia-smi" || len(f.GPUs) != 2 || f.Driver.DriverVersion != "580.159.04" || f.Driver.CUDADriverVersion != 13000 {
			t.Fatalf("facts = %+v, errors %v", f.Driver, f.Errors)
		}
		if f.Topology[0][1] != "NV18" || f.P2P[1][0].Read != P2POK || f.GPUs[0].LocalCPUs != "0-31" {
			t.Errorf("topology %v p2p %v", f.Topology, f.P2P)
		}
		if f.Driver.NVMLErrorCode != 12 {
			t.Errorf("NVML error lost: %+v", f.Driver)
		}
	})
	t.Run("cpu node without nvidia-smi", func(t *testing.T) {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
		run := func(context.Context, string, ...string) ([]byte, error) {
			return nil, &exec.Error{Name: "nvidia-smi", Err: exec.ErrNotFound}
		}
		f := Collect(context.Background(), Sources{NVML: lib, Root: loadRoot(t, "cpu-only"), Run: run}, CollectOptions{Script: "/nonexistent/train.py"})
		if f.Source != "" || len(f.GPUs) != 0 || f.Hostname != "cpu-01" {
			t.Errorf("facts = %+v", f)
		}
		if len(f.Errors) != 0 || f.ScriptMissing != "/nonexistent/train.py" {
			t.Errorf("errors = %v, script missing %q", f.Errors, f.ScriptMissing)
		}
		fs := Check(f, Want{NProc: "4"})
		for _, fd := range fs {
			if fd.Severity == SeverityFail && fd.ID != "script.present" {
				t.Errorf("CPU job on a CPU node fails:\n%s", dumpFindings(fs))
			}
		}
		if !slices.ContainsFunc(fs, func(fd Finding) bool {
			return fd.ID == "script.present" && fd.Severity == SeverityFail && fd.OfTheJob()
		}) {
			t.Errorf("no script.present failure, the job's, for a script that is not there:\n%s", dumpFindings(fs))
		}
	})
	t.Run("broken nvidia-smi is reported", func(t *testing.T) {
		run := func(context.Context, string, ...string) ([]byte, error) { return nil, errors.New("exit status 255") }
		f := Collect(context.Background(), Sources{Root: loadRoot(t, "h200-2gpu"), Run: run}, CollectOptions{})
		if f.Source != "" || len(f.Errors) == 0 {
			t.Errorf("source %q errors %v", f.Source, f.Errors)
		}
		if worst(Check(f, Want{NProc: "gpu"})) != SeverityFail {
			t.Error("no GPU facts on a driver node did not fail")
		}
	})
	t.Run("rdma node", func(t *testing.T) {
		f := Collect(context.Background(), Sources{Root: loadRoot(t, "rdma-2socket"), Interfaces: func() ([]Interface, error) {
			return []Interface{{Name: "lo", Addrs: []string{"127.0.0.1/8"}, Up: true, Loopback: true}}, nil
		}, Route: HostRoute}, CollectOptions{RouteTarget: "127.0.0.1:29500"})
		if len(f.RDMA) != 3 || f.Route == nil || f.Route.Interface != "lo" {
			t.Errorf("rdma %d route %+v", len(f.RDMA), f.Route)
		}
	})
}

// BenchmarkCollectNoGPU runs the system collectors on this machine, as on a
// CPU node: no NVML, no nvidia-smi.
func BenchmarkCollectNoGPU(b *testing.B) {
	src := Sources{Root: "/", Environ: os.Environ(), Now: time.Now, Interfaces: HostInterfaces, Route: HostRoute}
	opts := CollectOptions{Host: "local", RouteTarget: "127.0.0.1"}
	for b.Loop() {
		Collect(context.Background(), src, opts)
	}
}

// BenchmarkCollectMock8GPU collects from the 8-GPU mock (every pair's P2P
// and topology, 18 NVLinks per GPU) over the H200 testdata tree.
func BenchmarkCollectMock8GPU(b *testing.B) {
	lib, _ := fakeDGX(8)
	src := Sources{NVML: lib, Root: loadRoot(b, "h200-2gpu"), Now: time.Now}
	for b.Loop() {
		f := Collect(context.Background(), src, CollectOptions{})
		if len(f.GPUs) != 8 {
			b.Fatal("GPUs missing")
		}
	}
}

// TestCollectStalledSteps wedges NVML and the torch probe: Collect returns
// at the step limit and names both, and the checks fail the node.
func TestCollectStalledSteps(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	lib := &mock.Interface{InitFunc: func() nvml.Return { <-block; return nvml.SUCCESS }}
	src := Sources{
		NVML: lib,
		Root: t.TempDir(),
		Torch: func(ctx context.Context) TorchFacts {
			<-block
			return TorchFacts{}
		},
	}
	start := time.Now()
	f := Collect(context.Background(), src, CollectOptions{Host: "n7", StepTimeout: 200 * time.Millisecond})
	if took := time.Since(start); took > time.Second {
		t.Errorf("Collect took %v with a 200ms step limit", took)
	}
	var steps []string
	for _, s := range f.Stalled {
		steps = append(steps, s.Step)
	}
	if strings.Join(steps, ",") != "nvml,torch" {
		t.Fatalf("stalled = %v, want nvml,torch", steps)
	}
	var fails []string
	for _, fd := range Check(f, Want{NProc: "1", GPUsRequested: true}) {
		if fd.ID == "collect.stalled" {
			fails = append(fails, fd.Message)
			if fd.Severity != SeverityFail || fd.Remedy == "" || !strings.Contains(fd.Message, "n7") {
				t.Errorf("finding %+v: want a fail naming n7, with a remedy", fd)
			}
		}
	}
	if len(fails) != 2 {
		t.Errorf("collect.stalled findings = %q, want one per step", fails)
	}
}
