package wire

// The hidden gorun subcommands the head runs on a node (gorun itself,
// uploaded or preinstalled there), and torchrun in place of each worker.

// AgentCommand is the hidden gorun subcommand that is the node agent: it
// reads one job on stdin, runs it and tears its whole tree down.
const AgentCommand = "_agent"

// RankCommand is the hidden gorun subcommand that supervises one worker.
const RankCommand = "_rank"

// CollectCommand is the hidden gorun subcommand that collects one node's
// facts: `gorun _collect REQUEST` prints Facts as JSON.
const CollectCommand = "_collect"

// BandwidthCommand is the hidden gorun subcommand that measures all_reduce
// between two nodes: `gorun _bandwidth PAIRREQUEST` prints BandwidthFacts
// as JSON. The node's own measurement runs inside CollectCommand when
// Request.Bandwidth is set.
const BandwidthCommand = "_bandwidth"

// GPUFreeCommand is the hidden gorun subcommand the head runs on each node
// of a failed attempt before the next one starts: `gorun _gpufree REQUEST`
// (a GPUFreeRequest as JSON) kills what is left of the job on the node's
// GPUs, waits for their memory to be freed, and prints a GPUFreeAnswer as
// JSON.
const GPUFreeCommand = "_gpufree"
