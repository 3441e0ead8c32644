// Package agent is the node agent, `gorun _agent`: the program the head
// starts on each node (through sshexec: over SSH, srun or locally) to run
// one job and to make sure that nothing of it outlives the head. It runs on
// the node side of the wire only; its client is sshexec, and what the two
// say to each other (the job line, control bytes, frames, variables, the
// protocol version) is internal/wire.
//
// One file per idea:
//
//   - agent.go: the entry (ServeAgent, ServeAgentWith with its Sidecar):
//     read the job line, refuse a head of another wire.Protocol, start the
//     job, supervise it, and return its exit code;
//   - supervise.go: the loop that reads the head's control bytes
//     (readControl), heartbeats, signals and stops, until the whole tree
//     is gone;
//   - spawn.go, reaper.go, proctree.go: starting the job's main process in
//     a session of its own, reaping every child (the agent is a child
//     subreaper, so torchrun's workers, in sessions of their own, become
//     its children when their parents go), and signalling the tree as
//     /proc shows it;
//   - relay.go: the unix socket on which the workers' supervisors
//     (internal/rank) report, passed to the head as frames, and the head's
//     tells passed back;
//   - standby.go, asks.go: an agent on standby, its interpreter started
//     ahead, waiting for the next attempt's job, and the commands the head
//     asks of it meanwhile (the server's side of sshexec's Warmer and
//     asks);
//   - pool.go, poolscript.go: the pool server, the workers' interpreters
//     started ahead, which a worker's supervisor takes (rank.TakePooled);
//   - forkserver.go with warm.py (embedded): the Python fork server that
//     does the imports ahead for a standby and for the pool;
//   - tmpdir.go: the agent's private folders, and the sweep of those a
//     killed agent left.
//
// It never calls os.Exit and never parses gorun's command line: ServeAgent
// returns the exit code to main. Cancelling ctx stops the job gracefully
// (its whole tree, a grace, then SIGKILL). The package keeps no state
// between calls; ServeAgent takes over the process's stop signals and
// makes it a child subreaper, so it is meant to be the whole of `gorun
// _agent`.
package agent
