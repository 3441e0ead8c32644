// Package job owns the head's run of a gorun job, from the parsed command
// line to the last attempt: it resolves the hosts, picks the transport
// (local, ssh or srun) and connects, runs preflight on every node, builds
// the plan, and supervises the attempts through launch.Run, with the steps
// between one attempt and the next as hooks (hooks.go): the flight-recorder
// gather, the GPU teardown check (no process of the job may still hold GPU
// memory on a node when the next attempt starts: gpufree.go), the node
// recheck with elastic shrink, a fresh master port, and GPU telemetry.
//
// job does no argv parsing and creates no process-wide side effect: main
// gives it the parsed command line, the environment, the executable's path,
// the output streams and what it knows of the terminal (Config, UI), and
// maps the errors Run returns to exit codes. Run blocks until the job is
// over; cancelling its context is a graceful stop of every node, and
// closing UI.Kill skips the grace. Every connection Run opens is closed and
// every process it starts has been waited for when it returns.
//
// Errors caused by the user's input are *userr.InputError values
// returned before anything starts; the sentinels below mark the other
// outcomes main maps to their own exit codes.
package job
