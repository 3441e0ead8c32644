// Package sshexec runs commands on nodes, locally or over SSH, and makes sure
// they stop. It knows nothing about GPUs or torchrun: it runs, starts,
// streams, signals and uploads.
//
// A Runner reaches one node. Local runs processes on this machine; Remote
// holds one SSH connection per node, reused for every session, with host keys
// always verified against known_hosts and keepalives so a dead link is
// noticed within about 15 s.
//
// Long-running jobs are started through the node agent (gorun itself, run as a
// hidden subcommand, from a content-addressed copy under the remote user's
// cache dir that is uploaded on first use, when a launcher finds it missing): it starts the job in its own session as a child
// subreaper, streams its output, and tears the whole process tree down when
// told to, when its stdin closes, or when the head's heartbeat stops. So a
// job never outlives a lost head, and torchrun's workers, which run in
// sessions of their own, never survive either. With Job.Relay the agent
// also listens on a unix socket named in the job's environment and passes
// the frames its descendants send there to the head on its stdout, whole
// and in arrival order, framing the job's own output alongside; the head
// can send bytes back to them (Process.Tell). What the frames mean is the
// caller's business.
//
// Every blocking call takes a context.Context first; cancelling it stops the
// call. Runners are safe for concurrent use. Every string that reaches a
// remote shell goes through internal/shell.Quote.
package sshexec
