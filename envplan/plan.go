package envplan

import "github.com/gorun/gorun/cmdline"

// Plan is what gorun will run where, and why. Its JSON form is the public
// `--dry-run --format json` contract:
//
//	{"config": {...}, "nodes": [{"host", "node_rank", "address", "command",
//	  "env": {NAME: {"value", "reason", "source"}}, "ranks": [...]}], "notes": [...]}
type Plan struct {
	Config cmdline.Config `json:"config"`
	Nodes  []NodePlan     `json:"nodes"`
	Notes  []Note         `json:"notes"`
}

// NodePlan is one node's torchrun invocation.
type NodePlan struct {
	Host     string         `json:"host"`
	NodeRank int            `json:"node_rank"`
	Address  string         `json:"address"` // the address other nodes use to reach this node
	Command  []string       `json:"command"` // the exact torchrun argv
	Env      map[string]Var `json:"env"`
	Ranks    []RankPlan     `json:"ranks"`
}

// Sources of a planned variable.
const (
	SourceGorun    = "gorun"    // decided by gorun from a fact or a rule
	SourceUser     = "user"     // exported by the user or given with --env; always wins
	SourceTorchrun = "torchrun" // what torchrun itself will set; shown for clarity
)

// Var is one environment variable of a node, with why it has that value.
type Var struct {
	Value  string `json:"value"`
	Reason string `json:"reason"`
	Source string `json:"source"`
}

// RankPlan is one worker process.
type RankPlan struct {
	Rank      int    `json:"rank"`       // global rank; -1 when the rendezvous decides (c10d, elastic)
	LocalRank int    `json:"local_rank"` //
	GPU       *int   `json:"gpu"`        // physical GPU index; nil when unknown or CPU-only
	CPUs      string `json:"cpus"`       // cpulist ("0-11,96-107"); "" when not bound
}

// Note levels.
const (
	NoteInfo = "info"
	NoteWarn = "warn"
	// NotePending marks a decision that waits for preflight facts.
	NotePending = "pending"
)

// Note is a plan-wide remark: a decision deferred, a knob deliberately left
// to NCCL, a user override that contradicts a finding.
type Note struct {
	Level   string `json:"level"`
	Message string `json:"message"`
}
