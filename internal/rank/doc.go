// Package rank is `gorun _rank`, the worker's supervisor. It runs on the
// node inside torchrun's worker slot: torchrun, started with --no-python,
// runs `gorun _rank -- <script args>` in place of each worker, and Run
// stays that worker's parent (it does not exec), so that torchrun sees
// exactly what it would have seen without gorun while the head hears of
// every worker as it starts, prints, makes progress and ends.
//
// It owns one worker's life on the node:
//
//   - its start: the interpreter torchrun itself runs under (interp.go),
//     the worker's command and environment (command.go: the group's
//     restart count as TORCHELASTIC_RESTART_COUNT, faulthandler armed),
//     bound to the local rank's CPUs (affinity.go), in a process group of
//     its own with a parent-death signal, or taken from the node agent's
//     pool, an interpreter with its imports done (pooled.go: TakePooled,
//     the pool's client; its server is internal/agent's);
//   - signals (signals.go): every one it gets goes to the worker's group,
//     a stop signal marks the worker's end as a consequence, and Run ends
//     this process the way the worker ended, with its code or by its
//     signal;
//   - what it tells the head, as internal/wire frames on the node agent's
//     relay socket: the start, its output as each read returns it (output.go),
//     progress (progress.go: a touch of $GORUN_HEARTBEAT_FILE, and once,
//     the connection to the rendezvous store read from /proc/<pid>/net in
//     procnet.go), and the exit;
//   - what the head asks of it (wire.TellDump, wire.TellRAS): the worker's
//     Python stacks (stacks.go: py-spy where installed, else faulthandler
//     on SIGABRT, whose text on stderr is held until the worker is gone),
//     read by internal/pystack with each frame's source line from the
//     node's files and sent as one wire.FrameStacks frame; and on the one RAS reporter of the job, NCCL's RAS
//     report and its periodic collective counts as progress (ras.go,
//     through internal/ncclras).
//
// It never decides whether an exit is the job's failure, never restarts
// anything and never talks to other nodes: that is the head's (launch).
// Without a relay socket (not started by gorun's agent) the worker's
// output goes straight to this process's stdout and stderr, and the rest
// is as above.
//
// Concurrency and cancellation: Run blocks until the worker has exited.
// One goroutine per stream copies the worker's output, and others forward
// signals, watch progress, serve the head's requests and poll RAS; all of
// them end with the worker, through a context cancelled when it is reaped,
// and frames go out one at a time on the socket. Once the worker is gone,
// Run waits a moment (outputDrain) for output a leftover child still
// holds, then stops reading. The calling goroutine stays locked to its OS
// thread while the worker lives, because the worker's CPU mask and
// parent-death signal are tied to that thread. There is no package-level
// state, but Run takes over this process's signal handling and, for a
// worker killed by a signal, ends the process by that signal: it is meant
// to be the whole of `gorun _rank`.
package rank
