// Package launch is the head's supervisor, and nothing else: it runs a
// planned job on every node and supervises it as one group, down to every
// worker. It starts each node's torchrun through an sshexec.Runner, hears
// from each worker's supervisor as it starts, prints and exits, streams
// every line prefixed with its node and local rank, stops every node at
// once when any worker fails, catches hangs, restarts the whole group up to
// a limit, and leaves no process behind.
//
// launch runs on the head only. What runs on a node is elsewhere: the node
// agent in sshexec (with internal/node's sidecar), each worker's supervisor
// (`gorun _rank`) in internal/rank, and NCCL's RAS client in
// internal/ncclras. The two sides share only the frame kinds and payloads
// of internal/wire. launch consumes jobs and runners; it never parses
// flags, never runs a process itself, and knows nothing of SSH or GPUs.
// Run blocks until the group is done; cancelling its context is a graceful
// stop of every node (SIGTERM, grace, SIGKILL) and closing Options.Kill
// skips the grace. All output goes through one writer goroutine, so lines
// from different nodes never interleave.
//
// # Output
//
// Every worker's supervisor (`gorun _rank`, internal/rank) reads its
// worker's stdout and stderr and sends complete lines, with its local rank,
// as internal/wire frames to the node agent's relay socket; the agent puts
// them on its stdout as frames, beside torchrun's own output
// (wire.Job.Relay). So lines reach the head as they are printed, in order
// per worker, without torchrun's --tee (which polls log files). launch
// prefixes them with the node and local rank, "[node1 0] hello", and marks
// torchrun's own lines with the node alone, "[node1] ...". torchrun's --tee
// copies ("[default0]:hello") of lines a worker sent itself are dropped. A
// line is written when complete (a trailing '\r' of CRLF is dropped); a
// partial last line is completed with a newline when the stream ends. A line
// longer than 64 KiB is written in pieces, every piece after the first
// marked "[node1 0]+ " (in plain mode, where nothing could mark a piece,
// lines up to 16 MiB are written whole). A worker's partial line (a
// progress bar's "\r" updates) is not held past 100 ms: what there is of it
// is written as such a piece, showing the text after its last '\r', at most
// one piece a second per line. In plain mode a worker's bytes pass as it
// wrote them: a partial line 100 ms old is written as it is, a '\r' before
// the newline is kept and a last line without one gets none (gorun's own
// messages after it begin on a new line). Options.Diag gets gorun's own
// messages (failures, restarts, the final summary), in order with the output
// written before them. With Options.Plain (one local node, where gorun
// stands in for torchrun) lines pass through as printed.
//
// # Workers
//
// Each worker's supervisor (internal/rank, on the node) reports the
// worker's start, its joining the rendezvous store, heartbeats
// ($GORUN_HEARTBEAT_FILE touched) and its exit, and prints its stacks or
// NCCL's RAS report when launch asks (wire.TellDump, wire.TellRAS through
// Process.Tell). launch keeps, per attempt, what it has heard of every
// worker: started, last progress, joined, done.
//
// # Failures and restarts
//
// The first worker exit that gorun did not cause is the failure of the
// attempt, whatever torchrun does next: every node is stopped at once. The
// root cause is the earliest such exit by its worker's clock; a worker
// that was told to stop (a signal reached its supervisor) is a
// consequence, never the cause. Its Failure's Phase says how far it got:
// start-up (not yet at the rendezvous store), training, or exit (others
// had finished); the Phase constants list every value a Failure carries.
// Where no worker reports (torchrun itself failed, a node was lost or
// never started), the first node to exit non-zero, fail to start,
// or be lost is the failure, and a ChildFailedError "Root Cause" block
// torchrun printed names the worker; there a worker's exit 1 waits up to
// half a second for a node reporting a worker with a code of its own.
//
// With Options.HangTimeout, an attempt in which no worker made progress (a
// line, a heartbeat) for that long is hung: the silent workers are named
// (one by one up to 8, else counted), every worker is asked for its stacks
// (Process.Tell), which its supervisor sends as one wire.FrameStacks
// frame with the source lines read on its node, and the attempt fails with
// ExitHang. The culprit lines (culprit.go) group the ranks by where their
// stacks say they are, a collective or a line of user code, smallest
// group first, one "gorun: hang:" line each; the first group's first rank
// gets its stack on Diag, and Options.SaveStacks keeps every rank's. A
// rank stuck alone outside a collective becomes the hang's Failure.
//
// # Attempt states
//
// An attempt moves through states, forward only: running; on a hang, "hung:
// waiting for RAS" (when the job's RAS reporter is alive, NCCL's report is
// asked for first, while every rank still runs, for up to wire.RASWait),
// then "hung: dumping stacks" (until every silent worker's stacks are in,
// or dumpWait); then stopping, which a failure, the end of a diagnosis, the
// user's cancel or Kill enters from any state. Node exits after running
// are consequences, and worker exits after a hang was declared are never
// the cause.
//
// Attempts are numbered from 0 for Options.Attempt; launch adds nothing to
// a Job but Relay, so the caller exports the attempt number
// (wire.RestartCountVar, GORUN_RESTART_COUNT, which the worker's supervisor
// copies to TORCHELASTIC_RESTART_COUNT), picks a fresh port, or drops a
// node there.
//
// # Telemetry and the status line
//
// Frames of kind wire.FrameTelemetry go to Options.Telemetry with their
// node and attempt, and what it returns is printed on Diag; launch does
// not read them. With Options.Status and StatusOut, the writer goroutine
// keeps one status line under the output, erased before every write and
// redrawn after, and removed at the end; Options.Failed hears of each
// failed attempt as it is stopped.
//
// # Runners
//
// Run passes Runner.Start a context that ends when the user cancels only
// while the starts are in progress; afterwards processes are ended through
// Process.Stop, so a runner may tie a process to that context. Run relies on
// Process.Wait returning only after the process's output has been written;
// output written to a stream after that is dropped.
package launch
