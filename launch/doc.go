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
//
// # Output
//
// torchrun runs with --tee=3, so each worker line arrives as
// "[default0]:hello" ("[<role><local_rank>]:"). launch replaces that with
// the node and local rank, "[node1 0] hello", and marks torchrun's own lines
// with the node alone, "[node1] ...". A line is written only when complete
// (a trailing '\r' of CRLF is dropped); a partial last line is completed with
// a newline when the stream ends. A line longer than 64 KiB is written in
// pieces, every piece after the first marked "[node1 0]+ ". Options.Diag gets
// gorun's own messages (restarts, the final failure summary), in order with
// the output written before them. With Options.Plain (one local node, where
// gorun stands in for torchrun) lines pass through as torchrun prints them.
//
// # Worker start
//
// ExecRank is the other end of the plan's per-rank CPU binding: torchrun
// starts `gorun _rank -- <python> -u script`, which binds itself to its local
// rank's CPUs and execs the interpreter.
//
// # Failures and restarts
//
// The first node to exit non-zero, fail to start, or be lost (its Wait
// reports an error) is the failure of the attempt; every other node is then
// stopped and waited for, and the failures they report while stopping are
// consequences, not causes. One exception: a worker's exit 1 (a Python
// error, often a peer that lost its connection to the worker that crashed)
// waits up to half a second for a node reporting a worker with a code of
// its own, which is then named instead. Where torchrun printed a
// ChildFailedError "Root Cause" block, the failure names the worker's rank,
// local rank and own exit code. Attempts are numbered from 0 for Options.Attempt; launch adds
// nothing to a Job, so the caller exports the attempt number
// (GORUN_RESTART_COUNT) and picks a fresh port there.
//
// # Runners
//
// Run passes Runner.Start a context that ends when the user cancels only
// while the starts are in progress; afterwards processes are ended through
// Process.Stop, so a runner may tie a process to that context. Run relies on
// Process.Wait returning only after the process's output has been written;
// output written to a stream after that is dropped.
package launch
