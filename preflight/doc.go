// Package preflight collects facts about a node (NVIDIA driver and GPUs,
// topology, RDMA, limits, network, the torch build) and evaluates checks
// over them, producing a Report of findings, each with an id, a severity
// (ok, warn, fail), evidence and a remedy.
//
// preflight knows nothing about ranks or launching. It never creates an
// NVML handle or runs commands on its own: the caller passes an
// nvml.Interface (nil when NVML cannot be loaded), a filesystem root and a
// command runner in Sources, so every collector runs against testdata trees
// and go-nvml's mocks in tests.
//
// Collect blocks until every collector has finished or ctx is done; the
// collectors read files and call NVML, and only the nvidia-smi fallback
// runs a process, under ctx. Check, CheckAcross and Report are pure
// functions of their inputs and safe for concurrent use.
package preflight
