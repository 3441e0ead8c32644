package envplan

import (
	"github.com/gorun/gorun/hosts"

	"github.com/gorun/gorun/cmdline"
)

// Spec is everything Build needs from the user: the parsed command line, the
// resolved hosts and the head's environment.
type Spec struct {
	cmdline.CommandLine
	// Hosts in launch order; empty means one local node (plain torchrun mode).
	Hosts []hosts.Host
	// Environ is the head's environment (os.Environ as a map). Variables the
	// user exported that matter to the job (NCCL_*, GLOO_*, TORCH_*, ...) are
	// carried to every node and marked source "user".
	Environ map[string]string
	// RunID names what this run keeps on the nodes (the flight recorder's
	// dumps); main picks it at random.
	RunID string
}

// Facts are what preflight learned, reduced to what the plan needs, keyed by
// Host.Name. A host missing from the map (or a nil map) means "not known yet":
// the plan then says which decisions wait for preflight.
type Facts map[string]NodeFacts

// NodeFacts describe one node.
type NodeFacts struct {
	Hostname  string   // what the node calls itself
	CPUs      string   // CPUs the job may use there (sched_getaffinity), cpulist form
	GPUs      []GPU    // in NVML / PCI bus order
	Interface string   // the network interface that routes to the master address
	Address   string   // this node's address on Interface
	IBPorts   []string // ACTIVE RDMA ports as "mlx5_0:1"; nil when none
	// Gorun is the path of gorun on the node and Python the interpreter
	// torchrun starts workers with; both are needed to bind each worker's
	// CPUs inside its start (see bindWorkers). "" when unknown.
	Gorun  string
	Python string
	// P2PFaults are the GPU pairs whose P2P copies returned wrong data or
	// stalled in preflight's bandwidth check ("GPU0→GPU1 wrong data");
	// the plan then turns NCCL's P2P transport off on this node.
	P2PFaults []string
}

// GPU is one GPU as the plan sees it.
type GPU struct {
	Index    int    // NVML index (= CUDA ordinal under CUDA_DEVICE_ORDER=PCI_BUS_ID)
	BusID    string // sysfs form, "0000:18:00.0"
	NUMANode int    // -1 when unknown
	CPUs     string // local_cpulist of the GPU's PCI device; "" when unknown
}
