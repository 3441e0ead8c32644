package preflight

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestInitErrors(t *testing.T) {
	tests := []struct {
		name   string
		ret    nvml.Return
		reason string
	}{
		{"library missing", nvml.ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"},
		{"driver not loaded", nvml.ERROR_DRIVER_NOT_LOADED, "not running"},
		{"version mismatch", nvml.ERROR_LIB_RM_VERSION_MISMATCH, "different driver versions"},
		{"gpu lost", nvml.ERROR_GPU_IS_LOST, "fallen off the bus"},
		{"no permission", nvml.ERROR_NO_PERMISSION, "permission"},
		{"other", nvml.ERROR_UNKNOWN, "ERROR_UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := &mock.Interface{InitFunc: func() nvml.Return { return tt.ret }}
			var f Facts
			if collectNVML(lib, &f) {
				t.Fatal("collectNVML succeeded")
			}
			if f.Driver.NVMLErrorCode != int(tt.ret) || f.Driver.NVMLError == "" {
				t.Errorf("driver = %+v", f.Driver)
			}
			cause, remedy := InitCause(f.Driver.NVMLErrorCode)
			if !strings.Contains(cause, tt.reason) || remedy == "" {
				t.Errorf("InitCause = %q, %q", cause, remedy)
			}
		})
	}
}

// fakeDGX is an 8-GPU H100 board built from go-nvml's moq mocks, shaped
// like mock/dgxh100 (same names, memory, driver 550.54.15, CUDA 12040;
// that package needs github.com/google/uuid, which go.sum lacks) plus what
// it leaves out: distinct PCI addresses, P2P status, topology (GPUs 0-3 on
// socket 0, 4-7 on socket 1), NVLinks (18 up, except link 7 of GPU 5), CPU
// affinity and a busy GPU 2. ECC, persistence and compute mode are left
// unimplemented, as in dgxh100.
func fakeDGX(n int) (*mock.Interface, []*mock.Device) {
	devs := make([]*mock.Device, n)
	for i := range devs {
		devs[i] = fakeH100(i, devs)
	}
	lib := &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		SystemGetNVMLVersionFunc:       func() (string, nvml.Return) { return "12.550.54.15", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12040, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
	return lib, devs
}

func fakeH100(i int, all []*mock.Device) *mock.Device {
	index := func(d nvml.Device) int { return slices.Index(all, d.(*mock.Device)) }
	d := &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) {
			return fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i), nvml.SUCCESS
		},
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{Domain: 0, Bus: uint32(0x18 + 0x10*i), Device: 0}, nvml.SUCCESS
		},
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 81920 << 20}, nvml.SUCCESS
		},
		GetMigModeFunc: func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS },
		GetP2PStatusFunc: func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		},
		GetTopologyCommonAncestorFunc: func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if (index(o) < 4) == (i < 4) {
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		},
		GetNvLinkStateFunc: func(l int) (nvml.EnableState, nvml.Return) {
			if l >= 18 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			if i == 5 && l == 7 {
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		},
		GetNvLinkRemotePciInfoFunc: func(int) (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{Domain: 0, Bus: 0xe0, Device: 0}, nvml.SUCCESS // an NVSwitch
		},
		GetCpuAffinityFunc: func(int) ([]uint, nvml.Return) {
			if i < 4 {
				return []uint{0xff}, nvml.SUCCESS
			}
			return []uint{0xff00}, nvml.SUCCESS
		},
		GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) {
			if i == 3 {
				return 91, nvml.SUCCESS
			}
			return 38, nvml.SUCCESS
		},
		GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) {
			if i == 3 { // a hot GPU held down by its hardware
				return nvml.ClocksThrottleReasonHwThermalSlowdown | nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS
			}
			return nvml.ClocksEventReasonGpuIdle, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			if i == 2 {
				return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 2 << 30}}, nvml.SUCCESS
			}
			return nil, nvml.SUCCESS
		},
	}
	return d
}

func TestCollectNVMLDGXH100(t *testing.T) {
	f := Facts{CPUCount: 16}
	lib, _ := fakeDGX(8)
	if !collectNVML(lib, &f) {
		t.Fatalf("collectNVML failed: %+v", f.Driver)
	}
	if f.Driver.DriverVersion != "550.54.15" || f.Driver.CUDADriverVersion != 12040 {
		t.Errorf("driver = %+v", f.Driver)
	}
	if len(f.GPUs) != 8 {
		t.Fatalf("%d GPUs", len(f.GPUs))
	}
	g0, g2, g5 := f.GPUs[0], f.GPUs[2], f.GPUs[5]
	if g0.Name != "NVIDIA H100 80GB HBM3" || g0.BusID != "0000:18:00.0" || g0.MemoryMiB != 81920 || g0.ComputeCapability != "9.0" {
		t.Errorf("GPU 0 = %+v", g0)
	}
	if g0.LocalCPUs != "0-7" || f.GPUs[6].LocalCPUs != "8-15" {
		t.Errorf("affinity %q %q", g0.LocalCPUs, f.GPUs[6].LocalCPUs)
	}
	if len(g2.Processes) != 1 || g2.Processes[0].PID != 4242 || g2.Processes[0].UsedMiB != 2048 {
		t.Errorf("GPU 2 processes = %+v", g2.Processes)
	}
	if len(g5.NVLinks) != 18 || g5.NVLinks[7].Active || g5.NVLinks[7].Link != 7 || !g5.NVLinks[6].Active {
		t.Errorf("GPU 5 links = %+v", g5.NVLinks)
	}
	// The mock has no ECC, persistence or compute mode: named, not fatal.
	if !slices.Contains(g0.Unsupported, "ecc mode: not implemented") || g0.ECC != nil {
		t.Errorf("unsupported = %v", g0.Unsupported)
	}
	if f.P2P[0][1] != (P2PFacts{Read: P2POK, Write: P2POK, NVLink: P2POK}) {
		t.Errorf("p2p = %+v", f.P2P[0][1])
	}
	if g0.TemperatureC != 38 || !slices.Equal(g0.ClockEvents, []string{"gpu_idle"}) {
		t.Errorf("GPU 0 temperature %d, clock events %v", g0.TemperatureC, g0.ClockEvents)
	}
	if g3 := f.GPUs[3]; !slices.Equal(g3.ClockEvents, []string{"hw_slowdown", "hw_thermal_slowdown"}) {
		t.Errorf("GPU 3 clock events %v", g3.ClockEvents)
	}
	found := false
	for _, fd := range checkClocks(f) {
		found = found || (fd.ID == "gpu.clocks" && fd.Severity == SeverityWarn && strings.Contains(fd.Evidence, "GPU 3: hw_thermal_slowdown (91 C)"))
	}
	if !found {
		t.Errorf("no gpu.clocks warning for GPU 3: %+v", checkClocks(f))
	}
	if f.Topology[0][0] != "X" || f.Topology[0][1] != "NV18" || f.Topology[0][5] != "NV17" {
		t.Errorf("topology row 0 = %v", f.Topology[0])
	}
}

func TestPairFactsPCIeOnly(t *testing.T) {
	lib, devs := fakeDGX(8)
	for _, dev := range devs {
		dev.GetNvLinkStateFunc = nil // no NVLink: method missing
		dev.GetP2PStatusFunc = func(_ nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if idx == nvml.P2P_CAPS_INDEX_NVLINK {
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, nvml.SUCCESS
		}
	}
	var f Facts
	if !collectNVML(lib, &f) {
		t.Fatal("collectNVML failed")
	}
	if f.Topology[0][3] != "NODE" || f.Topology[0][4] != "SYS" || f.Topology[7][4] != "NODE" {
		t.Errorf("topology row 0 = %v", f.Topology[0])
	}
	if f.P2P[1][0].Read != P2PTopologyNotSupported || f.P2P[1][0].NVLink != P2PNotSupported {
		t.Errorf("p2p = %+v", f.P2P[1][0])
	}
}

func TestBusID(t *testing.T) {
	var p nvml.PciInfo
	for i, c := range "00000000:9A:00.0" {
		p.BusId[i] = int8(c)
	}
	tests := []struct {
		name string
		in   nvml.PciInfo
		want string
	}{
		{"numeric", nvml.PciInfo{Domain: 1, Bus: 0x9a, Device: 3}, "0001:9a:03.0"},
		{"string only", p, "0000:9a:00.0"},
		{"hidden remote", nvml.PciInfo{Domain: 0xffffffff, Bus: 0xff, Device: 0xff}, ""},
		{"empty", nvml.PciInfo{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := busID(tt.in); got != tt.want {
				t.Errorf("busID = %q, want %q", got, tt.want)
			}
		})
	}
}
