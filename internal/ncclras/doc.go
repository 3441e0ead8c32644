// Package ncclras is a client for NCCL's RAS subsystem (NCCL >= 2.24, on by
// default), named after NCCL's own client tool, ncclras. Every NCCL process
// of a job runs a RAS thread; the first one on a node binds NCCL_RAS_ADDR
// (default localhost:28028) and answers a line-based text protocol with a
// report on every communicator of the whole job, gathered from all its
// processes. The protocol and the report formats are NCCL's: the client
// side is src/ras/client.cc, the server side src/ras/client_support.cc
// (rasClientEventLoop, rasClientRunInit, rasClientRunComms,
// rasDumpCommsToJSON).
//
// A hang shows in the report as a communicator whose ranks launched
// different numbers of collectives (the one that did not join is behind),
// as ranks NCCL got no data from (the process is stopped or gone), or as
// ranks in a different state from the rest.
//
// It owns the conversation (Query, QueryJSON: client.go) and the reading of
// both report formats into one model (Parse, Report: report.go, text.go,
// json.go). It never decides what a report means for the job, never prints,
// and knows nothing of gorun's workers or frames: the worker's supervisor
// (internal/rank) asks and passes the answer on.
//
// Query and QueryJSON take a context.Context first and give up at its
// deadline or cancellation, which reaches every read and write as a
// connection deadline; they also ask NCCL to stop waiting for unresponsive
// processes in time to answer before that deadline. They keep no state
// between calls, so calls may run at once. Parse never fails and does no
// I/O: lines and fields it does not know are skipped, and a report cut
// short gives what it has, with Report.Complete unset. The package keeps
// no mutable state.
package ncclras
