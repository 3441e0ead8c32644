package preflight

import (
	"github.com/gorun/gorun/internal/cpuset"

	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// loadRoot materialises a testdata/roots file ("-- path --" sections, as in
// txtar) as a directory tree and returns its path. Trees live in one text
// file because sysfs names contain colons, which module zips refuse.
func loadRoot(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "roots", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var cur *strings.Builder
	var path string
	flush := func() {
		if path == "" {
			return
		}
		p := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(cur.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		l := strings.TrimRight(line, "\n")
		if strings.HasPrefix(l, "-- ") && strings.HasSuffix(l, " --") && len(l) > 6 {
			flush()
			path = strings.TrimSpace(l[3 : len(l)-3])
			cur = &strings.Builder{}
			continue
		}
		if cur != nil {
			cur.WriteString(line)
		}
	}
	flush()
	return dir
}

func TestParseProcVersion(t *testing.T) {
	tests := []struct {
		name, in, version, flavor string
	}{
		{"proprietary", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version: x\n", "535.104.05", "proprietary"},
		{"open x86_64", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n", "580.159.04", "open"},
		{"open aarch64", "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jul 29 09:39:52 UTC 2025", "580.65.06", "open"},
		{"two-part version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82  Thu Oct 21 2021 (VirtualGPU)", "470.82", "proprietary"},
		{"garbage", "hello\n", "", ""},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, v, fl := parseProcVersion(tt.in)
			if v != tt.version || fl != tt.flavor {
				t.Errorf("got version %q flavor %q, want %q %q", v, fl, tt.version, tt.flavor)
			}
			if strings.Contains(line, "\n") {
				t.Errorf("line %q holds a newline", line)
			}
		})
	}
}

func TestDecodeAffinity(t *testing.T) {
	words := []uint{0b1011, 1 << 63, 0, 1}
	got := cpuset.Format(decodeAffinity(words))
	if want := "0-1,3,127,192"; got != want {
		t.Errorf("decodeAffinity = %q, want %q", got, want)
	}
}

func TestCollectSystem(t *testing.T) {
	t.Run("h200-2gpu", func(t *testing.T) {
		var f Facts
		collectSystem(sysReader{root: loadRoot(t, "h200-2gpu")}, &f)
		d := f.Driver
		if !d.Loaded || d.KernelModuleVersion != "580.159.04" || d.Flavor != "open" {
			t.Errorf("driver = %+v", d)
		}
		if !d.Modules["nvidia"] || !d.Modules["nvidia_uvm"] || d.Modules["nvidia_drm"] || d.Modules["nouveau"] {
			t.Errorf("modules = %v", d.Modules)
		}
		wantDev := []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}
		if !reflect.DeepEqual(d.DevNodes, wantDev) {
			t.Errorf("dev nodes = %v", d.DevNodes)
		}
		if f.Hostname != "h200-2gpu" || f.CPUCount != 32 || f.CPUsAllowed != "0-31" || f.MemlockBytes != -1 {
			t.Errorf("host facts = %q %d %q %d", f.Hostname, f.CPUCount, f.CPUsAllowed, f.MemlockBytes)
		}
		if !reflect.DeepEqual(f.NUMANodes, []NUMANode{{ID: 0, CPUs: "0-31"}}) {
			t.Errorf("numa = %+v", f.NUMANodes)
		}
		if f.GDR.Module != "" {
			t.Errorf("gdr = %+v", f.GDR)
		}
		gpus := []GPUFacts{{BusID: "0000:00:06.0", NUMANode: -1}, {BusID: "0000:00:07.0", NUMANode: 5}}
		gpuLocality(sysReader{root: loadRoot(t, "h200-2gpu")}, gpus)
		for _, g := range gpus {
			if g.NUMANode != -1 || g.LocalCPUs != "0-31" {
				t.Errorf("locality of %s = %d %q", g.BusID, g.NUMANode, g.LocalCPUs)
			}
		}
	})
	t.Run("rdma-2socket", func(t *testing.T) {
		root := loadRoot(t, "rdma-2socket")
		var f Facts
		collectSystem(sysReader{root: root}, &f)
		if f.Driver.KernelModuleVersion != "535.104.05" || f.Driver.Flavor != "proprietary" {
			t.Errorf("driver = %+v", f.Driver)
		}
		if f.GDR.Module != "nvidia_peermem" || f.MemlockBytes != 65536 {
			t.Errorf("gdr %+v memlock %d", f.GDR, f.MemlockBytes)
		}
		if len(f.NUMANodes) != 2 || f.NUMANodes[1].CPUs != "28-55,84-111" {
			t.Errorf("numa = %+v", f.NUMANodes)
		}
		ports, err := collectRDMA(sysReader{root: root})
		if err != nil {
			t.Fatal(err)
		}
		want := []RDMAPort{
			{Device: "mlx5_0", Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", NetDev: "ib0", NUMANode: 0},
			{Device: "mlx5_1", Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Rate: "200 Gb/sec (4X HDR)", NetDev: "ens1f0np0", NUMANode: 1,
				RoCEv2GIDs: []string{"3=0000:0000:0000:0000:0000:ffff:0a0a:0a0c"}},
			{Device: "mlx5_2", Port: 1, State: "DOWN", PhysState: "Disabled", LinkLayer: "Ethernet", Rate: "40 Gb/sec (4X QDR)", NetDev: "ens1f1np1", NUMANode: 1},
		}
		if !reflect.DeepEqual(ports, want) {
			t.Errorf("ports =\n%+v\nwant\n%+v", ports, want)
		}
		if ports[1].Name() != "mlx5_1:1" {
			t.Errorf("Name = %q", ports[1].Name())
		}
	})
	t.Run("cpu-only", func(t *testing.T) {
		var f Facts
		collectSystem(sysReader{root: loadRoot(t, "cpu-only")}, &f)
		if f.Driver.Loaded || f.Driver.Modules["nvidia"] || len(f.Driver.DevNodes) != 0 {
			t.Errorf("driver = %+v", f.Driver)
		}
		if len(f.Errors) != 0 {
			t.Errorf("errors = %v", f.Errors)
		}
	})
	t.Run("nouveau", func(t *testing.T) {
		var f Facts
		collectSystem(sysReader{root: loadRoot(t, "nouveau")}, &f)
		if !f.Driver.Modules["nouveau"] {
			t.Errorf("nouveau not seen: %v", f.Driver.Modules)
		}
	})
}

func TestEnvFacts(t *testing.T) {
	got := envFacts([]string{"CUDA_VISIBLE_DEVICES=0,1", "AWS_SECRET_ACCESS_KEY=x", "NCCL_DEBUG=INFO", "HOME=/root",
		"LD_LIBRARY_PATH=/usr/local/cuda/compat", "NVIDIA_API_KEY=nvapi-123", "bogus",
		"NCCL_PLUGIN_API_KEY=k", "NCCL_IB_PKEY=0x8001", "TORCH_HUB_URL=https://me:pw@hub.example/x"})
	want := map[string]string{"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "LD_LIBRARY_PATH": "/usr/local/cuda/compat",
		"NVIDIA_API_KEY": "<hidden>", "NCCL_PLUGIN_API_KEY": "<hidden>", "NCCL_IB_PKEY": "0x8001",
		"TORCH_HUB_URL": "https://me:<hidden>@hub.example/x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("envFacts = %v", got)
	}
}

func TestInterfaceWith(t *testing.T) {
	ifs := []Interface{{Name: "lo", Addrs: []string{"127.0.0.1/8"}}, {Name: "eth0", Addrs: []string{"10.0.0.5/24", "fe80::1/64"}}}
	if got := interfaceWith(ifs, []byte{10, 0, 0, 5}); got != "eth0" {
		t.Errorf("interfaceWith = %q", got)
	}
	rt := HostRoute(t.Context(), "127.0.0.1", ifs)
	if rt.Err != "" || rt.Interface != "lo" || rt.Source != "127.0.0.1" {
		t.Errorf("HostRoute = %+v", rt)
	}
}

func TestNVMLLibraryVersion(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := sysReader{root: root}
	if v := nvmlLibraryVersion(r); v != "" {
		t.Fatalf("no library: got %q", v)
	}
	if err := os.Symlink("libnvidia-ml.so.580.159.04", filepath.Join(dir, "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	if v := nvmlLibraryVersion(r); v != "580.159.04" {
		t.Fatalf("got %q, want 580.159.04", v)
	}
}
