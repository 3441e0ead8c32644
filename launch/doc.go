// Package launch runs a planned job on every node and supervises it as one
// group: it starts each node's torchrun through an sshexec.Runner, streams
// every line prefixed with its node and local rank, stops every node at once
// when any part fails, restarts the whole group up to a limit, and leaves no
// process behind.
//
// launch consumes jobs and runners; it never parses flags and knows nothing of
// SSH or GPUs. Run blocks until the group is done; cancelling its context is a
// graceful stop of every node (SIGTERM, grace, SIGKILL) and closing
// Options.Kill skips the grace. All output goes through one writer goroutine,
// so lines from different nodes never interleave.
package launch
