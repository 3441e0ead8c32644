package preflight

import (
	"strconv"
	"time"
)

// Facts is everything preflight learned about one node. It is plain data with
// stable snake_case JSON names: the remote collector prints it and the head
// decodes it, so fields are only ever added, never renamed.
type Facts struct {
	Host        string      `json:"host"`         // the name the head used for the node
	Hostname    string      `json:"hostname"`     // what the node calls itself
	Time        time.Time   `json:"time"`         // node clock when collected (clock-skew check)
	Kernel      string      `json:"kernel"`       // uname -r
	Arch        string      `json:"arch"`         // uname -m (x86_64, aarch64)
	CPUCount    int         `json:"cpu_count"`    // online CPUs
	CPUsAllowed string      `json:"cpus_allowed"` // sched_getaffinity, cpulist form "0-31"
	NUMANodes   []NUMANode  `json:"numa_nodes"`   // from /sys/devices/system/node
	Source      string      `json:"source"`       // "nvml", "nvidia-smi" or "" when no GPU source worked
	Driver      DriverFacts `json:"driver"`
	GPUs        []GPUFacts  `json:"gpus"`
	// P2P[i][j] is the peer-to-peer status between GPU i and GPU j (NVML
	// index order); the diagonal is left zero.
	P2P [][]P2PFacts `json:"p2p,omitempty"`
	// Topology[i][j] is the path type between GPU i and GPU j as `nvidia-smi
	// topo -m` spells it: X, NV#, PIX, PXB, PHB, NODE, SYS.
	Topology [][]string `json:"topology,omitempty"`
	RDMA     []RDMAPort `json:"rdma"`
	GDR      GDRFacts   `json:"gdr"`
	// ShmBytes is the size of /dev/shm; 0 when it is missing or unreadable.
	ShmBytes int64 `json:"shm_bytes"`
	// MemlockBytes is RLIMIT_MEMLOCK (soft); -1 means unlimited.
	MemlockBytes int64       `json:"memlock_bytes"`
	Interfaces   []Interface `json:"interfaces"`
	Route        *Route      `json:"route,omitempty"` // towards CollectOptions.RouteTarget
	Torch        TorchFacts  `json:"torch"`
	// Env holds the variables that shape a GPU job (CUDA_*, NCCL_*, TORCH_*,
	// NVIDIA_*, LD_LIBRARY_PATH, ...) as found on the node, each value as
	// secret.Redact prints it. Other variables are never collected, and a
	// credential among these (NCCL_PLUGIN_API_KEY, a password in a URL) is
	// hidden on the node, so secrets do not travel.
	Env map[string]string `json:"env,omitempty"`
	// ScriptSHA256 is the hex SHA-256 of the training script on this node;
	// empty when no script was given or it could not be read.
	ScriptSHA256 string `json:"script_sha256,omitempty"`
	// ScriptMissing is the training script's path where it (or the
	// folder it is in: the working directory the head gave) is not on
	// this node; "" when it is, or was not looked for.
	ScriptMissing string `json:"script_missing,omitempty"`
	// Gorun is the gorun binary that collected these facts on the node; the
	// plan's worker-start hook runs it.
	Gorun string `json:"gorun,omitempty"`
	// Errors lists collector problems that did not stop collection
	// ("read /sys/class/infiniband: permission denied").
	Errors []string `json:"errors,omitempty"`
	// Stalled lists the collector steps that did not finish within their
	// time limit ("nvml", "torch", ...): the checks make each a fail.
	Stalled []Stall `json:"stalled,omitempty"`
	// Bandwidth holds the figures `--bandwidth` measured on the node
	// (moving real bytes); nil when not asked for.
	Bandwidth *BandwidthFacts `json:"bandwidth,omitempty"`
}

// Stall is one collector step that did not finish in time.
type Stall struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"` // the limit it ran past
}

// NUMANode is one NUMA node and its CPUs.
type NUMANode struct {
	ID   int    `json:"id"`
	CPUs string `json:"cpus"` // cpulist form
}

// DriverFacts describe the NVIDIA kernel driver and user-space library.
type DriverFacts struct {
	// Loaded is true when /proc/driver/nvidia/version exists (the nvidia
	// kernel module is loaded).
	Loaded bool `json:"loaded"`
	// ProcVersion is the first line of /proc/driver/nvidia/version.
	ProcVersion string `json:"proc_version,omitempty"`
	// KernelModuleVersion is the version parsed from ProcVersion ("580.159.04").
	KernelModuleVersion string `json:"kernel_module_version,omitempty"`
	// Flavor is "open" or "proprietary" (from ProcVersion), "" when unknown.
	Flavor string `json:"flavor,omitempty"`
	// NVMLVersion and DriverVersion come from NVML (or nvidia-smi).
	NVMLVersion   string `json:"nvml_version,omitempty"`
	DriverVersion string `json:"driver_version,omitempty"`
	// CUDADriverVersion is 1000*major + 10*minor (12040 = 12.4); 0 when unknown.
	CUDADriverVersion int `json:"cuda_driver_version,omitempty"`
	// Modules maps kernel module names (underscore form) to loaded or not;
	// every module preflight cares about is present as a key.
	Modules map[string]bool `json:"modules"`
	// DevNodes are the /dev/nvidia* device nodes present.
	DevNodes []string `json:"dev_nodes,omitempty"`
	// NVMLError is the NVML Init error text, empty on success or when NVML
	// was not tried; NVMLErrorCode is its nvml.Return value.
	// LibraryVersion is the version in the file name libnvidia-ml.so.1
	// resolves to ("libnvidia-ml.so.580.159.04"); it must match the kernel
	// module's even when NVML cannot start.
	LibraryVersion string `json:"library_version,omitempty"`
	NVMLError      string `json:"nvml_error,omitempty"`
	NVMLErrorCode  int    `json:"nvml_error_code,omitempty"`
}

// GPUFacts describe one GPU. Fields NVML could not answer keep their zero
// value and are named in Unsupported.
type GPUFacts struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	UUID              string `json:"uuid"`
	BusID             string `json:"bus_id"`                       // sysfs form, "0000:18:00.0"
	ComputeCapability string `json:"compute_capability,omitempty"` // "9.0"
	MemoryMiB         uint64 `json:"memory_mib"`
	// ComputeMode is "Default", "Exclusive_Thread", "Prohibited" or
	// "Exclusive_Process" (nvidia-smi spelling); "" when unknown.
	ComputeMode string `json:"compute_mode,omitempty"`
	MIG         bool   `json:"mig"`         // MIG mode currently enabled
	Persistence bool   `json:"persistence"` // persistence mode enabled
	// ECC is nil when ECC mode is unknown or unsupported.
	ECC *bool `json:"ecc,omitempty"`
	// UncorrectedECC is the volatile uncorrected ECC error count.
	UncorrectedECC      uint64         `json:"uncorrected_ecc,omitempty"`
	RetiredPagesPending bool           `json:"retired_pages_pending"`
	RetiredPages        int            `json:"retired_pages"`
	RemapPending        bool           `json:"remap_pending"`
	RemapFailed         bool           `json:"remap_failed"`
	Processes           []ProcessFacts `json:"processes,omitempty"`
	PCIeGen             int            `json:"pcie_gen"`
	PCIeGenMax          int            `json:"pcie_gen_max"`
	PCIeWidth           int            `json:"pcie_width"`
	PCIeWidthMax        int            `json:"pcie_width_max"`
	// NUMANode is the GPU's NUMA node from sysfs; -1 when unknown.
	NUMANode  int           `json:"numa_node"`
	LocalCPUs string        `json:"local_cpus,omitempty"` // cpulist form
	NVLinks   []NVLinkFacts `json:"nvlinks,omitempty"`
	// FabricState is the NVSwitch fabric state ("completed", "in_progress",
	// "not_started"); "" when not supported.
	FabricState string `json:"fabric_state,omitempty"`
	// TemperatureC is the GPU's temperature; ClockEvents the reasons its
	// clocks are held below their maximum right now, named as in
	// internal/clockevent ("gpu_idle", "hw_thermal_slowdown", ...).
	TemperatureC int      `json:"temperature_c,omitempty"`
	ClockEvents  []string `json:"clock_events,omitempty"`
	// Unsupported names the facts NVML did not answer for this GPU
	// ("ecc: Not Supported").
	Unsupported []string `json:"unsupported,omitempty"`
}

// ProcessFacts is one compute process on a GPU.
type ProcessFacts struct {
	PID     int    `json:"pid"`
	Name    string `json:"name,omitempty"`
	UsedMiB uint64 `json:"used_mib"`
}

// NVLinkFacts is one NVLink of a GPU.
type NVLinkFacts struct {
	Link        int    `json:"link"`
	Active      bool   `json:"active"`
	RemoteBusID string `json:"remote_bus_id,omitempty"` // sysfs form; an NVSwitch on SXM boards
}

// P2P status strings, as `nvidia-smi topo -p2p` prints them.
const (
	P2POK                   = "OK"  // supported
	P2PChipsetNotSupported  = "CNS" // chipset not supported
	P2PGPUNotSupported      = "GNS" // GPU not supported
	P2PTopologyNotSupported = "TNS" // topology not supported
	P2PDisabledByRegkey     = "DR"  // disabled by registry key
	P2PNotSupported         = "NS"  // not supported
	P2PUnknown              = "U"   // unknown
)

// P2PFacts is the peer-to-peer status of one ordered GPU pair; each field is
// one of the P2P* status strings, "" when not measured.
type P2PFacts struct {
	Read   string `json:"read,omitempty"`
	Write  string `json:"write,omitempty"`
	NVLink string `json:"nvlink,omitempty"`
}

// RDMAPort is one port of an RDMA device under /sys/class/infiniband.
type RDMAPort struct {
	Device     string   `json:"device"`                // mlx5_0
	Port       int      `json:"port"`                  // 1
	State      string   `json:"state"`                 // ACTIVE, DOWN, INIT, ARMED, ACTIVE_DEFER
	PhysState  string   `json:"phys_state"`            // LinkUp, Disabled, Polling, ...
	LinkLayer  string   `json:"link_layer"`            // InfiniBand or Ethernet (RoCE)
	Rate       string   `json:"rate"`                  // "400 Gb/sec (4X NDR)"
	NetDev     string   `json:"netdev,omitempty"`      // bound network interface, if any
	NUMANode   int      `json:"numa_node"`             // -1 when unknown
	RoCEv2GIDs []string `json:"rocev2_gids,omitempty"` // "3=::ffff:10.0.0.12" (index=GID)
}

// Name is the port in NCCL_IB_HCA form, "mlx5_0:1".
func (p RDMAPort) Name() string { return p.Device + ":" + strconv.Itoa(p.Port) }

// GDRFacts say which GPUDirect RDMA kernel support is present.
type GDRFacts struct {
	// Module is "nvidia_peermem", "nv_peer_mem" or "" when neither is loaded.
	Module string `json:"module,omitempty"`
	// Evidence is the sysfs path that proved it.
	Evidence string `json:"evidence,omitempty"`
}

// Interface is one network interface.
type Interface struct {
	Name     string   `json:"name"`
	Addrs    []string `json:"addrs,omitempty"` // CIDR form
	Up       bool     `json:"up"`
	Loopback bool     `json:"loopback,omitempty"`
	MTU      int      `json:"mtu,omitempty"`
}

// Route is how the node reaches a target address: the interface and source
// address the kernel picks.
type Route struct {
	Target    string `json:"target"`
	Interface string `json:"interface,omitempty"`
	Source    string `json:"source,omitempty"`
	Err       string `json:"err,omitempty"`
	// Probe is the TCP port on Target a real connection was opened to from
	// Source (0: none tried), with how long it took or why it failed.
	Probe    int     `json:"probe,omitempty"`
	ProbeMs  float64 `json:"probe_ms,omitempty"`
	ProbeErr string  `json:"probe_err,omitempty"`
}

// TorchFacts describe the PyTorch build the node's python would import,
// read from its version file without importing torch.
type TorchFacts struct {
	Python  string `json:"python,omitempty"`  // interpreter path used
	Dir     string `json:"dir,omitempty"`     // the torch package's folder, where found
	Version string `json:"version,omitempty"` // "2.11.0+cu130"
	CUDA    string `json:"cuda,omitempty"`    // "13.0"; "" for CPU builds
	NCCL    string `json:"nccl,omitempty"`    // "2.28.9" when known
	Found   bool   `json:"found"`
	Err     string `json:"err,omitempty"`
	// Guessed: Python is python3 from the PATH, as torchrun's #! line
	// names no interpreter (a wrapper script, a container launcher).
	Guessed bool `json:"guessed,omitempty"`
	// TorchrunMissing says why the torchrun command (--torchrun's first
	// word) is not there to run: not on the PATH, or no such file; "" when
	// it is.
	TorchrunMissing string `json:"torchrun_missing,omitempty"`
}
