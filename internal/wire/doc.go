// Package wire is what the head and a node's workers say to each other:
// the frames a worker's supervisor (`gorun _rank`, package internal/rank)
// sends on the node agent's relay socket, which the agent passes to the head
// as they are (sshexec.Job.Relay), the bytes the head sends back to every
// worker's supervisor (sshexec.Process.Tell), the environment variables
// both sides agree on, and the request and answer of the teardown check the
// head runs on each node before a restart (`gorun _gpufree`, gpufree.go:
// done by internal/node, asked for by internal/job).
//
// It owns the vocabulary only: frame kinds, payload layouts and their
// encoding. The framing itself (kind, length, payload) is sshexec's
// (sshexec.AppendFrame, sshexec.FrameDecoder); what a frame means to the
// group is launch's, and how a worker produces it is rank's. wire does no
// I/O, starts no goroutine, keeps no state, and is safe for concurrent use.
package wire
