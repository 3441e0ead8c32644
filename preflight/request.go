package preflight

import "time"

// Request tells a node's collector what to look at beyond the node itself.
// It travels as JSON to wire.CollectCommand on the node.
type Request struct {
	// Torchrun is how torchrun starts on the node: the Python and torch
	// behind it are the ones checked.
	Torchrun string `json:"torchrun"`
	// Script is the training script, hashed to compare across nodes.
	Script string `json:"script"`
	// RouteTo and ProbePort: see CollectOptions.RouteTarget and ProbePort.
	RouteTo   string `json:"route_to"`
	ProbePort int    `json:"probe_port"`
	// BudgetSeconds bounds the whole collection on the node, so that it
	// answers, naming its stalled steps, before the head stops waiting.
	BudgetSeconds float64 `json:"budget_s,omitempty"`
	// Bandwidth, when set (BandwidthNode or BandwidthAll), makes the node
	// also run the bandwidth measurement after collecting its facts.
	Bandwidth string `json:"bandwidth,omitempty"`
	// SkipTorch: the node does not start an interpreter to find torch (a
	// recheck of a run without preflight, which is about reach and routes
	// only); no torch check has anything to say then.
	SkipTorch bool `json:"skip_torch,omitempty"`
	// TorchAt, on a recheck during the run, is where an earlier check
	// found torch on this node (fleet.RunOptions.TorchAt): the node reads it
	// there instead of starting the interpreter to find it (ReadTorchAt).
	TorchAt *TorchAt `json:"torch_at,omitempty"`
}

// Budget is how long the collector may take; zero means no bound beyond
// each step's.
func (r Request) Budget() time.Duration {
	return time.Duration(r.BudgetSeconds * float64(time.Second))
}

// Options returns the CollectOptions the collector runs with.
func (r Request) Options() CollectOptions {
	return CollectOptions{Script: r.Script, RouteTarget: r.RouteTo, ProbePort: r.ProbePort}
}
