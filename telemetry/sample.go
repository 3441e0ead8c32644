package telemetry

import (
	"time"
)

// Config is what the head tells each node's sampler (the agent's sidecar
// settings, as JSON).
type Config struct {
	// Interval is the sampling period; 0 or less means DefaultInterval.
	Interval time.Duration `json:"interval"`
	// GPUs are the job's GPUs on this node with the ranks on each; empty
	// samples every GPU NVML sees, with no ranks.
	GPUs []GPU `json:"gpus,omitempty"`
}

// GPU is one of the job's GPUs on a node, by its NVML index.
type GPU struct {
	Index      int   `json:"index"`
	Ranks      []int `json:"ranks,omitempty"`       // global ranks; -1 where the rendezvous decides
	LocalRanks []int `json:"local_ranks,omitempty"` // local ranks
}

// DefaultInterval is the sampling period when Config gives none.
const DefaultInterval = time.Second

// Sample is one GPU at one moment. Optional readings are nil (null in
// JSON, NaN in pandas) where NVML does not report them on that GPU, or,
// for rates, on the first sample (a rate needs two readings).
type Sample struct {
	Node       string    `json:"node"` // set by the head: the node's name as launched
	GPU        int       `json:"gpu"`  // NVML index (PCI bus order)
	UUID       string    `json:"uuid"`
	Ranks      []int     `json:"ranks"` // global ranks on this GPU; empty when unknown
	LocalRanks []int     `json:"local_ranks"`
	Time       time.Time `json:"time"`    // node clock, RFC 3339 with nanoseconds
	Attempt    int       `json:"attempt"` // set by the head: the attempt, from 1 as every output numbers it

	// SMPct is NVML's utilization.gpu: the percent of the last period in
	// which a kernel ran (nvidia-smi dmon's "sm" column).
	SMPct      *float64 `json:"sm_pct"`
	MemUsedMiB *float64 `json:"mem_used_mib"`
	PowerW     *float64 `json:"power_w"`
	PowerCapW  *float64 `json:"power_limit_w"`
	SMClockMHz *float64 `json:"sm_clock_mhz"`
	TempC      *float64 `json:"temp_c"`
	// PCIe and NVLink throughput in MB/s (10^6 bytes), received and
	// transmitted by the GPU: NVLink averaged over the period since the
	// previous sample (NVML's data counters, summed over the links), PCIe
	// over NVML's 20 ms window (nvmlDeviceGetPcieThroughput, what
	// nvidia-smi dmon -s t shows).
	PCIeRxMBps   *float64 `json:"pcie_rx_mbps"`
	PCIeTxMBps   *float64 `json:"pcie_tx_mbps"`
	NVLinkRxMBps *float64 `json:"nvlink_rx_mbps"`
	NVLinkTxMBps *float64 `json:"nvlink_tx_mbps"`
	// ClockReasons are the active clock-event reasons other than
	// gpu_idle, named as in internal/clockevent ("sw_power_cap",
	// "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
	// "sw_thermal_slowdown", "sync_boost", "applications_clocks_setting",
	// "board_limit", ...).
	ClockReasons []string `json:"clock_reasons"`
	// Events are the Xid and ECC events since the previous sample ("xid
	// 79", "ecc double-bit", "ecc uncorrected +2").
	Events []string `json:"events"`
}

// Frame is what a node's sampler sends to the head, one per sshexec
// FrameTelemetry frame, as JSON: a Sample, or a Notice said once.
type Frame struct {
	Sample *Sample `json:"sample,omitempty"`
	Notice string  `json:"notice,omitempty"`
}

// Ranked reports whether ranks are known for the sample.
func (s *Sample) Ranked() bool { return len(s.Ranks) > 0 || len(s.LocalRanks) > 0 }

func f64(v float64) *float64 { return &v }
