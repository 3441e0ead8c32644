// Package sshexec is the head's transport: it runs commands on nodes,
// locally, over SSH or through srun, and makes sure they stop. It runs on
// the head only; what runs on a node for it is internal/agent (the node
// agent) and internal/rank, and what the two sides say to each other is
// internal/wire. It knows nothing about GPUs or torchrun: it runs, starts,
// streams, signals and uploads.
//
// A Runner reaches one node. Local runs processes on this machine; Remote
// holds one SSH connection per node, reused for every session, with host keys
// always verified against known_hosts and keepalives so a dead link is
// noticed within about 15 s. Both run gorun's own hidden subcommands
// (AgentOutput), and say where they reached the node (Addr).
//
// Dialling reads what `ssh` reads: ssh_config with its Includes,
// known_hosts, identity files, ssh-agent. Each is read once per Dial or
// DialAll and shared by its dials (one agent connection, known_hosts and
// ssh_config indexed by host), so a fan-out's cost per node does not grow
// with the number of nodes the files describe; a file changed during a
// fan-out is read again by the next one (accept-new re-reads the
// known_hosts file it writes to, under its lock). Every file goes through
// internal/inputfile, so a FIFO or device named by mistake is refused at
// once instead of hanging gorun. What would fail every node alike (a
// missing --known-hosts, a --ssh-identity ssh would refuse, an encrypted
// key no ssh-agent holds) is found by Config.Check before any connection;
// Dial and DialAll run it first. What a dial chooses to ignore (an
// unsupported Match, StrictHostKeyChecking no) goes to Config.Warn, once per
// distinct message, also when the dial then fails. Host key failures are a
// *HostKeyError that errors.As finds through every wrap, DialAll's
// multierror included.
//
// Long-running jobs are started through the node agent (`gorun _agent`,
// internal/agent: gorun itself, from a content-addressed copy under the
// remote user's cache dir that is uploaded on first use, when a launcher
// finds it missing, or --remote-gorun's). sshexec is the agent's client:
// it sends the job line (a wire.Job, with the head's wire.Protocol), a
// heartbeat and the head's control bytes on the agent's stdin, and copies
// its stdout and stderr; the agent tears the job's whole tree down when
// told to, when its stdin closes, or when the heartbeat stops, so a job
// never outlives a lost head. With wire.Job.Relay the agent's stdout is a
// stream of frames (wire.FrameDecoder reads it): the job's own output and
// what its descendants send on the agent's relay socket; the head can send
// bytes back to them (Process.Tell). What the frames mean is the caller's
// business. The head's side of the warm start and of the hand-over ahead
// (Warmer, AheadHander: warmclient.go) and of the asks through an agent on
// standby (standbyask.go) are here too; their node side is the agent's.
//
// Every blocking call takes a context.Context first; cancelling it stops the
// call, a dial included: the SSH handshake, which has no context of its
// own, is cut by closing its connection, so a server that accepts and
// never answers holds nobody. Runners are safe for concurrent use. Every
// string that reaches a remote shell goes through internal/shell.Quote.
package sshexec
