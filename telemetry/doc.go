// Package telemetry watches the job's GPUs while it runs: it samples NVML
// on each node (Sampler, Run), names stragglers and faults as the samples
// arrive on the head (Detector), keeps the live status line (Status), and
// writes what it saw as JSON Lines (JSONL) and as one self-contained HTML
// report (Report).
//
// On a node, Run is the node agent's sidecar (agent.ServeAgentWith): it
// opens NVML through the nvml.Interface main gives it, samples the job's
// GPUs every Config.Interval from its own goroutine in the agent, and hands
// each sample to a send function as a Frame; the agent puts it on its
// stream to the head as an wire.FrameTelemetry frame. The job is never
// touched: NVML's queries read counters the driver keeps anyway, and the
// sampler runs in the agent process, not in any worker. A node where NVML
// does not load or has no GPU sends one Frame with a Notice and then
// nothing.
//
// telemetry opens no connection and parses no flags; the only I/O is
// NVML's, through the interface given, and the writers given. Run blocks
// until its context ends. Detector, Status and Report are not safe for
// concurrent use; the head feeds them from one goroutine (or under one
// lock).
package telemetry
