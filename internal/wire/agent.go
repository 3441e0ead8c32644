package wire

// What the head and the node agent (`gorun _agent`) say to each other:
// after the job line, the head writes control bytes on the agent's stdin;
// the agent writes frames (frame.go) on its stdout; and the agent tells
// its relay clients, the workers' supervisors, what they must do.

// Control bytes the head sends to the agent after the job line.
const (
	CtlHeartbeat byte = 'h' // the head is alive
	// CtlTerm stops the job: one signal byte (0: SIGTERM) and the grace in
	// milliseconds (uint32, big endian; 0: Job.Grace) follow. Each worker
	// gets the signal once, and what is left after the grace is killed.
	CtlTerm byte = 't'
	// CtlInterrupt is CtlTerm for a signal the head itself got from outside
	// (a Ctrl-C, a scheduler's SIGTERM): the same payload, but the workers'
	// supervisors hear of it as of a signal gorun got (RelayHad), so a
	// worker that had its own copy (the signal went to every process of
	// the job) gets no second.
	CtlInterrupt byte = 'i'
	CtlKill      byte = 'k' // SIGKILL the job's whole tree now
	CtlTell      byte = 'r' // the next byte goes to every relay client
	CtlJob       byte = 'j' // a job line follows, for an agent on standby
	// CtlSignal passes a signal to every worker once, stopping nothing: the
	// signal's number follows in one byte.
	CtlSignal byte = 's'
	// CtlRelease releases a job handed ahead (Job.Gated): its workers'
	// supervisors start their workers.
	CtlRelease byte = 'g'
)

// TermLen is the length of a CtlTerm or CtlInterrupt message.
const TermLen = 1 + 1 + 4

// CtlAsk (head to agent) is followed by one sshexec askRequest as a JSON line: the
// agent runs its own gorun with the request's arguments and answers with
// a FrameAnswer frame on its stdout.
const CtlAsk byte = 'a'

// Frame kinds the agent itself writes; every other kind comes from a relay
// client and is passed on untouched.
const (
	FrameStdout byte = 'O' // a chunk of the job's main process's stdout
	FrameStderr byte = 'E' // a chunk of its stderr
	// FrameTelemetry carries what the agent's sidecar (agent.ServeAgentWith)
	// sends while the job runs: in gorun, one GPU sample or notice as JSON
	// (telemetry.Frame). sshexec does not read it.
	FrameTelemetry byte = 'T'
	// FrameLost says that a relay client hung up without its last word
	// (a frame of kind Job.RelayEnd): it was killed. The payload is the
	// first frame it sent (kind byte, then payload, cut at 4 KiB),
	// which says who it was.
	FrameLost byte = 'L'
	// FrameFlush carries one newline and means nothing. Under Slurm,
	// slurmstepd line-buffers a step's output (srun's --unbuffered would
	// put the agent on a pseudo-terminal, which rewrites binary frames),
	// so a frame with no newline byte in it (a worker's start, its join of
	// the store, a heartbeat) would wait there for the next one that has
	// one: seconds, or the job's end. An agent that runs as a step ends
	// each write with this frame.
	FrameFlush byte = 'n'
)

// FrameStart is the agent's word, on a relayed job's stream, on how the
// job's main process started: a StartInfo as JSON.
const FrameStart byte = 'W'

// FrameAnswer is an agent on standby's answer to an ask: an sshexec askAnswer as
// JSON. It never reaches a job's output: the head's side of the standby
// takes it out of the stream (sshexec askStream).
const FrameAnswer byte = 'A'

// StartInfo says how a job's main process started.
type StartInfo struct {
	Warm bool `json:"warm"` // a warm interpreter was released
	// Released: a job handed ahead (Job.Gated), already started, was
	// released (said at the release, after the job's own StartInfo).
	Released bool `json:"released,omitempty"`
	// Cold says why a job that asked for a warm start did not get one.
	Cold string `json:"cold,omitempty"`
	// Time is when the job was handed over or started (node clock, Unix
	// nanoseconds).
	Time int64 `json:"time_ns"`
}

// What the agent itself tells its relay clients (gorun's worker
// supervisors), each followed by one byte, a signal's number. The bytes
// the head sends through Process.Tell are passed on as they are; gorun's
// own (TellDump, TellRAS) differ from these.
const (
	// RelayStop: the job is stopping; give your worker the signal, once.
	RelayStop byte = 'T'
	// RelaySignal: give your worker the signal, once; nothing stops.
	RelaySignal byte = 'S'
	// RelayHad: gorun itself got the signal from outside (this agent, or
	// the head, which passed it on as a CtlInterrupt), and stops the job.
	// A signal that reached gorun and you both was sent to every process
	// of the job (Slurm signalling a step, say), and your worker has its
	// own copy; otherwise give it the signal, once.
	RelayHad byte = 'H'
	// RelayGo: the job handed ahead is released (Job.Gated); start your
	// worker. No byte follows.
	RelayGo byte = 'G'
)

// SelfArg, as an element of Job.Argv, stands for the agent's own
// executable: the gorun on the node, wherever it was installed or uploaded.
const SelfArg = "{gorun}"

// RelayDirPrefix begins the name of the private directory that holds a
// relay's socket; the job's processes may keep files of their own there,
// which go with it.
const RelayDirPrefix = "gorun-agent-"
