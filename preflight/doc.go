// Package preflight collects facts about a node (NVIDIA driver and GPUs,
// topology, RDMA, limits, network, the torch build) and evaluates checks
// over them, producing a Report of findings, each with an id, a severity
// (ok, warn, fail), evidence and a remedy.
//
// Which side of the wire: preflight runs on each node (the collector,
// `gorun _collect`, and a node's side of the bandwidth check, `gorun
// _bandwidth`, both through internal/node), and its checks, lints and
// report are pure functions the head calls too. The head's side, which
// asks every node's agent over sshexec, gathers the reports and measures
// across node pairs, is preflight/fleet. preflight imports no head-side
// package (sshexec, envplan, preflight/fleet), so the node side links none
// of them; internal/node's TestSideImports holds it to that.
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
//
// The bandwidth check (MeasureNode, MeasurePair; `gorun preflight
// --bandwidth`) is the exception that moves real bytes: it runs the embedded
// bandwidth.py with the Python torchrun uses, in a process group of its
// own, reads its events as they come and kills the whole group when a step
// outlives its limit or ctx ends, so it returns within the step's limit
// however the driver behaves. checkBandwidth and CheckCross judge the
// figures; they are pure.
package preflight
