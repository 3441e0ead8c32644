package preflight

import (
	"github.com/gorun/gorun/internal/cpuset"

	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gorun/gorun/internal/clockevent"
)

// InitCause explains an NVML Init error code: what it means on a node and
// what to do about it. Unknown codes get the library's own error name.
func InitCause(code int) (cause, remedy string) {
	switch nvml.Return(code) {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found: no NVIDIA driver installed, or the container does not mount the driver libraries",
			"install the NVIDIA driver, or run the container with the NVIDIA container toolkit (--gpus all)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA kernel driver is not running",
			"load it (modprobe nvidia) or check dmesg for why it failed to load"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "the loaded kernel module and libnvidia-ml are different driver versions (driver upgraded without reload)",
			"reboot the node, or unload and reload the nvidia modules with no GPU process running"
	case nvml.ERROR_GPU_IS_LOST:
		return "a GPU has fallen off the bus",
			"drain the node; a reset or reboot is needed (see dmesg for Xid 79)"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to open the NVIDIA device nodes",
			"check /dev/nvidia* permissions and the container's device cgroup"
	case nvml.ERROR_RESET_REQUIRED:
		return "a GPU needs a reset", "reset the GPU (nvidia-smi -r) or reboot the node"
	case nvml.ERROR_IRQ_ISSUE:
		return "the kernel detected an interrupt problem with a GPU", "check dmesg; reboot the node"
	case nvml.ERROR_INSUFFICIENT_POWER:
		return "a GPU's power cables are not connected properly", "check the GPU power connections"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "libnvidia-ml is too old for this build", "upgrade the NVIDIA driver"
	}
	return nvml.Return(code).Error(), "check the NVIDIA driver installation (nvidia-smi)"
}

// nvmlCall runs one NVML query. go-nvml's mocks panic when a method has no
// implementation, and some drivers lack some calls, so a panic is treated
// like ERROR_NOT_SUPPORTED and the query is named in *missing.
func nvmlCall[T any](missing *[]string, what string, fn func() (T, nvml.Return)) (v T, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			*missing = append(*missing, what+": not implemented")
			ok = false
		}
	}()
	v, ret := fn()
	if ret != nvml.SUCCESS {
		*missing = append(*missing, what+": "+ret.Error())
		return v, false
	}
	return v, true
}

// quietCall is nvmlCall for queries whose failure is expected and not worth
// reporting (the links past a GPU's last NVLink, for example).
func quietCall[T any](fn func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if r := recover(); r != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return fn()
}

// collectNVML fills the NVML-derived facts: driver versions, GPUs, P2P and
// topology. It returns false when NVML could not be initialised; the error
// is then in f.Driver.NVMLError.
func collectNVML(lib nvml.Interface, f *Facts) bool {
	var initErrs []string
	ret, _ := quietCall(func() (nvml.Return, nvml.Return) { r := lib.Init(); return r, r })
	if ret != nvml.SUCCESS {
		f.Driver.NVMLError = ret.Error()
		f.Driver.NVMLErrorCode = int(ret)
		return false
	}
	defer quietCall(func() (nvml.Return, nvml.Return) { r := lib.Shutdown(); return r, r })

	if v, ok := nvmlCall(&initErrs, "driver version", lib.SystemGetDriverVersion); ok {
		f.Driver.DriverVersion = v
	}
	if v, ok := nvmlCall(&initErrs, "nvml version", lib.SystemGetNVMLVersion); ok {
		f.Driver.NVMLVersion = v
	}
	// _v2 asks libcuda itself; the plain call may report "a known supported
	// version" when libcuda is absent, so it is only the fallback.
	if v, ret := quietCall(lib.SystemGetCudaDriverVersion_v2); ret == nvml.SUCCESS {
		f.Driver.CUDADriverVersion = v
	} else if v, ok := nvmlCall(&initErrs, "cuda driver version", lib.SystemGetCudaDriverVersion); ok {
		f.Driver.CUDADriverVersion = v
	}
	n, ok := nvmlCall(&initErrs, "device count", lib.DeviceGetCount)
	for _, e := range initErrs {
		f.Errors = append(f.Errors, "nvml: "+e)
	}
	if !ok {
		return true
	}
	devs := make([]nvml.Device, 0, n)
	f.GPUs = make([]GPUFacts, 0, n)
	for i := 0; i < n; i++ {
		var missing []string
		d, ok := nvmlCall(&missing, "handle", func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByIndex(i) })
		if !ok {
			f.Errors = append(f.Errors, fmt.Sprintf("nvml: GPU %d: %s", i, strings.Join(missing, "; ")))
			continue
		}
		devs = append(devs, d)
		f.GPUs = append(f.GPUs, gpuFacts(lib, d, i, f.CPUCount))
	}
	f.P2P, f.Topology = pairFacts(devs, f.GPUs)
	return true
}

// gpuFacts reads one GPU. cpuCount sizes the affinity query.
func gpuFacts(lib nvml.Interface, d nvml.Device, index, cpuCount int) GPUFacts {
	g := GPUFacts{Index: index, NUMANode: -1}
	m := &g.Unsupported
	if v, ok := nvmlCall(m, "name", d.GetName); ok {
		g.Name = v
	}
	if v, ok := nvmlCall(m, "uuid", d.GetUUID); ok {
		g.UUID = v
	}
	if p, ok := nvmlCall(m, "pci info", d.GetPciInfo); ok {
		g.BusID = busID(p)
	}
	type cc struct{ major, minor int }
	if v, ok := nvmlCall(m, "compute capability", func() (cc, nvml.Return) {
		a, b, r := d.GetCudaComputeCapability()
		return cc{a, b}, r
	}); ok {
		g.ComputeCapability = fmt.Sprintf("%d.%d", v.major, v.minor)
	}
	if v, ok := nvmlCall(m, "memory", d.GetMemoryInfo); ok {
		g.MemoryMiB = v.Total >> 20
	}
	if v, ok := nvmlCall(m, "compute mode", d.GetComputeMode); ok {
		g.ComputeMode = computeModeName(v)
	}
	type mig struct{ cur, pending int }
	if v, ok := nvmlCall(m, "mig mode", func() (mig, nvml.Return) {
		a, b, r := d.GetMigMode()
		return mig{a, b}, r
	}); ok {
		g.MIG = v.cur == nvml.DEVICE_MIG_ENABLE
	}
	if v, ok := nvmlCall(m, "persistence mode", d.GetPersistenceMode); ok {
		g.Persistence = v == nvml.FEATURE_ENABLED
	}
	if v, ok := nvmlCall(m, "ecc mode", func() (nvml.EnableState, nvml.Return) {
		cur, _, r := d.GetEccMode()
		return cur, r
	}); ok {
		on := v == nvml.FEATURE_ENABLED
		g.ECC = &on
		if n, ok := nvmlCall(m, "ecc errors", func() (uint64, nvml.Return) {
			return d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		}); ok {
			g.UncorrectedECC = n
		}
	}
	// Hopper and later replace page retirement with row remapping; NVML
	// says "not supported" for whichever a GPU lacks.
	if v, ok := nvmlCall(m, "retired pages pending", d.GetRetiredPagesPendingStatus); ok {
		g.RetiredPagesPending = v == nvml.FEATURE_ENABLED
		for _, cause := range []nvml.PageRetirementCause{
			nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
			nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
		} {
			if pages, ok := nvmlCall(m, "retired pages", func() ([]uint64, nvml.Return) { return d.GetRetiredPages(cause) }); ok {
				g.RetiredPages += len(pages)
			}
		}
	}
	type remap struct{ pending, failed bool }
	if v, ok := nvmlCall(m, "remapped rows", func() (remap, nvml.Return) {
		_, _, p, fl, r := d.GetRemappedRows()
		return remap{p, fl}, r
	}); ok {
		g.RemapPending, g.RemapFailed = v.pending, v.failed
	}
	if v, ok := nvmlCall(m, "temperature", func() (uint32, nvml.Return) { return d.GetTemperature(nvml.TEMPERATURE_GPU) }); ok {
		g.TemperatureC = int(v)
	}
	if v, ok := nvmlCall(m, "clocks event reasons", d.GetCurrentClocksEventReasons); ok {
		g.ClockEvents = clockevent.Names(v)
	}
	if procs, ok := nvmlCall(m, "processes", d.GetComputeRunningProcesses); ok {
		for _, p := range procs {
			pf := ProcessFacts{PID: int(p.Pid), UsedMiB: p.UsedGpuMemory >> 20}
			if name, ret := quietCall(func() (string, nvml.Return) { return lib.SystemGetProcessName(int(p.Pid)) }); ret == nvml.SUCCESS {
				pf.Name = name
			}
			g.Processes = append(g.Processes, pf)
		}
	}
	if v, ok := nvmlCall(m, "pcie gen", d.GetCurrPcieLinkGeneration); ok {
		g.PCIeGen = v
	}
	if v, ok := nvmlCall(m, "pcie gen max", d.GetMaxPcieLinkGeneration); ok {
		g.PCIeGenMax = v
	}
	if v, ok := nvmlCall(m, "pcie width", d.GetCurrPcieLinkWidth); ok {
		g.PCIeWidth = v
	}
	if v, ok := nvmlCall(m, "pcie width max", d.GetMaxPcieLinkWidth); ok {
		g.PCIeWidthMax = v
	}
	if cpuCount > 0 {
		if words, ret := quietCall(func() ([]uint, nvml.Return) { return d.GetCpuAffinity(cpuCount) }); ret == nvml.SUCCESS {
			g.LocalCPUs = cpuset.Format(decodeAffinity(words))
		}
	}
	if v, ret := quietCall(d.GetGpuFabricInfo); ret == nvml.SUCCESS {
		g.FabricState = fabricStateName(v.State)
	}
	g.NVLinks = nvlinks(d)
	return g
}

// nvlinks lists the links NVML knows for d. Links past the last one answer
// NOT_SUPPORTED or INVALID_ARGUMENT and are skipped.
func nvlinks(d nvml.Device) []NVLinkFacts {
	var out []NVLinkFacts
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		st, ret := quietCall(func() (nvml.EnableState, nvml.Return) { return d.GetNvLinkState(l) })
		if ret != nvml.SUCCESS {
			continue
		}
		lf := NVLinkFacts{Link: l, Active: st == nvml.FEATURE_ENABLED}
		if lf.Active {
			if p, ret := quietCall(func() (nvml.PciInfo, nvml.Return) { return d.GetNvLinkRemotePciInfo(l) }); ret == nvml.SUCCESS {
				lf.RemoteBusID = busID(p)
			}
		}
		out = append(out, lf)
	}
	return out
}

// pairFacts measures every ordered GPU pair: P2P read/write/NVLink status
// and the topology path type `nvidia-smi topo -m` would print.
func pairFacts(devs []nvml.Device, gpus []GPUFacts) ([][]P2PFacts, [][]string) {
	n := len(devs)
	if n == 0 {
		return nil, nil
	}
	p2p := make([][]P2PFacts, n)
	topo := make([][]string, n)
	status := func(a, b nvml.Device, idx nvml.GpuP2PCapsIndex) string {
		s, ret := quietCall(func() (nvml.GpuP2PStatus, nvml.Return) { return a.GetP2PStatus(b, idx) })
		if ret != nvml.SUCCESS {
			return ""
		}
		return p2pStatusName(s)
	}
	for i := range devs {
		p2p[i] = make([]P2PFacts, n)
		topo[i] = make([]string, n)
		for j := range devs {
			if i == j {
				topo[i][j] = "X"
				continue
			}
			p2p[i][j] = P2PFacts{
				Read:   status(devs[i], devs[j], nvml.P2P_CAPS_INDEX_READ),
				Write:  status(devs[i], devs[j], nvml.P2P_CAPS_INDEX_WRITE),
				NVLink: status(devs[i], devs[j], nvml.P2P_CAPS_INDEX_NVLINK),
			}
			if links := nvlinkCount(gpus[i], gpus[j], p2p[i][j].NVLink == P2POK); links > 0 {
				topo[i][j] = "NV" + strconv.Itoa(links)
				continue
			}
			lvl, ret := quietCall(func() (nvml.GpuTopologyLevel, nvml.Return) { return devs[i].GetTopologyCommonAncestor(devs[j]) })
			if ret == nvml.SUCCESS {
				topo[i][j] = topologyName(lvl)
			}
		}
	}
	return p2p, topo
}

// nvlinkCount is the number of NVLinks joining a and b: links whose remote
// end is the other GPU, or, when the links end at NVSwitches and NVML says
// the pair talks over NVLink, the smaller count of active links.
func nvlinkCount(a, b GPUFacts, viaNVLink bool) int {
	direct, activeA, activeB := 0, 0, 0
	for _, l := range a.NVLinks {
		if !l.Active {
			continue
		}
		activeA++
		if b.BusID != "" && l.RemoteBusID == b.BusID {
			direct++
		}
	}
	for _, l := range b.NVLinks {
		if l.Active {
			activeB++
		}
	}
	if direct > 0 {
		return direct
	}
	if viaNVLink {
		return min(activeA, activeB)
	}
	return 0
}

// busID formats a PCI address the way sysfs names it: "0000:18:00.0".
func busID(p nvml.PciInfo) string {
	if p.Domain == 0xffffffff {
		return "" // the remote end is hidden (NVSwitch behind a hypervisor)
	}
	if p.Domain == 0 && p.Bus == 0 && p.Device == 0 {
		// Some callers fill only the string form ("00000000:18:00.0").
		s := int8String(p.BusId[:])
		if s == "" {
			return ""
		}
		id, err := SysfsBusID(s)
		if err != nil {
			return ""
		}
		return id
	}
	return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
}

func int8String(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// decodeAffinity turns NVML's CPU bitmask words (64 CPUs per word) into
// CPU numbers.
func decodeAffinity(words []uint) []int {
	var cpus []int
	for w, word := range words {
		for word != 0 {
			b := bits.TrailingZeros64(uint64(word))
			cpus = append(cpus, w*64+b)
			word &^= 1 << b
		}
	}
	sort.Ints(cpus)
	return cpus
}

func computeModeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "Default"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "Exclusive_Thread"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "Prohibited"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "Exclusive_Process"
	}
	return fmt.Sprintf("Unknown(%d)", m)
}

func p2pStatusName(s nvml.GpuP2PStatus) string {
	switch s {
	case nvml.P2P_STATUS_OK:
		return P2POK
	case nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED:
		return P2PChipsetNotSupported
	case nvml.P2P_STATUS_GPU_NOT_SUPPORTED:
		return P2PGPUNotSupported
	case nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED:
		return P2PTopologyNotSupported
	case nvml.P2P_STATUS_DISABLED_BY_REGKEY:
		return P2PDisabledByRegkey
	case nvml.P2P_STATUS_NOT_SUPPORTED:
		return P2PNotSupported
	}
	return P2PUnknown
}

// topologyName maps NVML's PCIe common ancestor to `nvidia-smi topo -m`
// path types.
func topologyName(l nvml.GpuTopologyLevel) string {
	switch l {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return "PIX"
	case nvml.TOPOLOGY_MULTIPLE:
		return "PXB"
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "PHB"
	case nvml.TOPOLOGY_NODE:
		return "NODE"
	case nvml.TOPOLOGY_SYSTEM:
		return "SYS"
	}
	return ""
}

func fabricStateName(s uint8) string {
	switch s {
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		return "not_started"
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		return "in_progress"
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		return "completed"
	}
	return ""
}
