package wire

import (
	"strconv"
	"strings"
)

// Variables of the job's environment that gorun's processes on either side
// of the wire name: the head or the agent sets each, and the agent, a
// worker's supervisor or the pool's interpreter reads it. Test hooks are
// not here: they belong to the package they test.

// RelaySocketVar names the unix socket, in a relayed job's environment, on
// which the job's descendants report to the agent (see Job.Relay).
const RelaySocketVar = "GORUN_AGENT_SOCK"

// GateVar, set to "1" in the environment of a job handed ahead
// (Job.Gated), tells each worker's supervisor to wait for RelayGo on the
// relay socket before it starts its worker.
const GateVar = "GORUN_GATED"

// AgentStepVar marks an agent that sshexec.Srun started as a job step of its own.
const AgentStepVar = "GORUN_AGENT_STEP"

// PoolSocketVar names, in a pooled job's environment, the unix socket on
// which a worker's supervisor takes its interpreter.
const PoolSocketVar = "GORUN_POOL_SOCK"

// PoolRoomVar is the variable that holds a pooled interpreter's room in
// its environment; warm.py drops it before anything reads the
// environment.
const PoolRoomVar = "GORUN_POOL_ROOM"

// StepsVar holds, in the job's environment, how each worker's supervisor
// recognises training steps and checkpoints in its worker's output
// (stepscan.Patterns.Encode: JSON, "{}" for the defaults); unset, it reads
// none (--step-pattern off). The worker does not see it.
const StepsVar = "GORUN_STEPS"

// RankCPUsVar carries each local rank's CPU set to the worker's supervisor:
// cpulists in local-rank order, separated by ';' ("0-11;12-23").
const RankCPUsVar = "GORUN_RANK_CPUS"

// WorkerEchoVar holds, as torchrun's --redirects takes it per local rank
// ("0:3,1:1"; "1" for every stream of every rank), the streams each
// worker's supervisor also writes where torchrun captures them (the
// user's --tee and --redirects files). Any other would reach torchrun's
// console as well as the head's lines: twice.
const WorkerEchoVar = "GORUN_WORKER_ECHO"

// WorkerQuietVar holds, as torchrun's --redirects takes it per local rank
// ("0:3,1:1"), the streams each worker's supervisor keeps off the console:
// those --redirects sends to files and --tee does not copy back (torchrun
// shows neither). Bit 1 is stdout, bit 2 stderr.
const WorkerQuietVar = "GORUN_WORKER_QUIET"

// FlightRecorderDirVar names, in the workers' environment, the node-side
// directory the flight recorder writes to; each worker's supervisor makes
// it, since torch does not.
const FlightRecorderDirVar = "GORUN_FLIGHT_RECORDER_DIR"

// RunIDVar holds the run's id in the environment of every process of the
// job on every node (the head sets it on each node's job): the teardown
// check before a restart (GPUFreeCommand) tells the job's processes from
// others' by it.
const RunIDVar = "GORUN_RUN_ID"

// Variables of the workers' environment that both sides name.
const (
	// HeartbeatFileVar names a file a quiet script may touch to show
	// progress; the worker's supervisor creates one unless the user set
	// the name.
	HeartbeatFileVar = "GORUN_HEARTBEAT_FILE"
	// CheckpointFileVar names a file a script may touch once it has
	// saved a checkpoint, where no line it prints says so
	// (--checkpoint-pattern); the worker's supervisor creates one unless
	// the user set the name.
	CheckpointFileVar = "GORUN_CHECKPOINT_FILE"
	// RestartCountVar is the attempt number of the whole group (0 first),
	// set by the head; the worker's supervisor copies it to torchrun's
	// TORCHELASTIC_RESTART_COUNT.
	RestartCountVar = "GORUN_RESTART_COUNT"
	// LogDirVar holds torchrun's --log-dir where the user gave one, for
	// the workers' supervisors, which keep its attempts in one run folder
	// (internal/logdir); the workers never see it.
	LogDirVar = "GORUN_LOG_DIR"
	// MaxRestartsVar is the group's --max-restarts, set by the head with
	// RestartCountVar; the worker's supervisor copies it to torchrun's
	// TORCHELASTIC_MAX_RESTARTS (each torchrun runs with 0).
	MaxRestartsVar = "GORUN_MAX_RESTARTS"
	// MergedOutputVar set to 1 says that the head's stdout and stderr are
	// the same file (a terminal, or 2>&1): the worker's supervisor then
	// gives the worker one pipe for both, so that their order is kept
	// (two pipes read apart cannot keep it), and sends all of it as
	// FrameOut. Not with WorkerEchoVar, whose files keep them apart.
	MergedOutputVar = "GORUN_MERGED_OUTPUT"
	// TTYVar, set where the head's own stdout or stderr is a terminal,
	// asks each worker's supervisor to give the worker a pseudo-terminal
	// of that size instead of a pipe for those streams, as torchrun's
	// workers see the terminal: "COLSxROWS:out,err" (FormatTTY).
	TTYVar = "GORUN_TTY"
)

// StdStreams reads torchrun's --redirects or --tee value, and so
// WorkerEchoVar's and WorkerQuietVar's, for one local rank:
// "3" for every rank, or "0:1,1:2" per rank (a rank not named: 0).
// Bit 1 is stdout, bit 2 stderr.
func StdStreams(spec string, localRank int) int {
	spec = strings.TrimSpace(spec)
	if n, err := strconv.Atoi(spec); err == nil {
		return n & 3
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), ":")
		if r, err := strconv.Atoi(k); ok && err == nil && r == localRank {
			n, _ := strconv.Atoi(v)
			return n & 3
		}
	}
	return 0
}
