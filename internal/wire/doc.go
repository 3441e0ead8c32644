// Package wire is the protocol between the head and the nodes, and so is
// used on both sides of the wire: everything one gorun process says to
// another, in one place, so that the two sides cannot drift apart.
//
//   - job.go: the job line the head sends the node agent (Job, with the
//     Pool it may ask for) and what a worker's supervisor and the agent's
//     pool say to each other (PoolTake, PoolReply);
//   - protocol.go: the protocol's version (Protocol), which the agent
//     compares with the head's before it starts anything;
//   - frame.go: the framing (kind, length, payload) of the agent's stdout
//     and of its relay socket (AppendFrame, ReadFrame, FrameDecoder), and
//     the bounded JSON lines of the job and the pool (ReadLine);
//   - agent.go: what the head and the node agent (`gorun _agent`) say:
//     the control bytes the head writes on the agent's stdin (Ctl*), the
//     frames the agent writes of its own (FrameStdout, FrameStart, ...,
//     with StartInfo), and what the agent tells its relay clients
//     (Relay*);
//   - asks.go: the head's asks through an agent on standby, and their
//     answers;
//   - wire.go: the frames a worker's supervisor (`gorun _rank`, package
//     internal/rank) sends on the agent's relay socket, which the agent
//     passes to the head as they are, and the bytes the head sends back
//     to every worker's supervisor (Tell*, through sshexec.Process.Tell);
//   - env.go: every GORUN_* variable one process sets and another reads;
//   - commands.go: the hidden subcommands the head runs on a node;
//   - signals.go: the signals that stop a job;
//   - gpufree.go: the request and answer of the teardown check the head
//     runs on each node before a restart (`gorun _gpufree`: done by
//     internal/node, asked for by internal/job).
//
// Frame kinds that share a stream are distinct (TestFrameKindsDistinct
// reads every constant of the package). wire owns the vocabulary and its
// encoding only: what a frame means to the group is launch's, how the
// agent relays it is internal/agent's, how the head sends and reads it is
// sshexec's, and how a worker produces it is rank's. wire opens nothing:
// it reads and writes only the readers, writers and connections it is
// handed; it starts no goroutine, keeps no state, and is safe for
// concurrent use.
package wire
