package cmdline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"syscall"
	"time"
)

// Config is the effective torchrun configuration, derived exactly as torchrun
// 2.11 derives it (torch/distributed/run.py config_from_args). JSON names are
// torchrun's own config names; this is part of gorun's public --format json
// contract, so fields are only ever added. In JSON, nproc_per_node is a
// number when it is one (8) and a string only for a device word ("gpu"):
// see MarshalJSON.
type Config struct {
	NNodesMin int `json:"nnodes_min"`
	NNodesMax int `json:"nnodes_max"`
	// NProcPerNode is an integer in canonical form ("8"), or auto, cpu,
	// gpu or xpu as given. It stays a string in Go so callers compare it
	// with a word or strconv.Atoi it without a conversion.
	NProcPerNode           string            `json:"nproc_per_node"`
	RdzvBackend            string            `json:"rdzv_backend"`
	RdzvEndpoint           string            `json:"rdzv_endpoint"`
	RdzvID                 string            `json:"rdzv_id"`
	RdzvConfigs            map[string]string `json:"rdzv_configs"`
	Standalone             bool              `json:"standalone"`
	MaxRestarts            int               `json:"max_restarts"`
	MonitorInterval        float64           `json:"monitor_interval"`
	StartMethod            string            `json:"start_method"`
	EventLogHandler        string            `json:"event_log_handler"`
	Role                   string            `json:"role"`
	Module                 bool              `json:"module"`
	NoPython               bool              `json:"no_python"`
	RunPath                bool              `json:"run_path"`
	LogDir                 string            `json:"log_dir"`
	Redirects              string            `json:"redirects"`
	Tee                    string            `json:"tee"`
	LocalRanksFilter       string            `json:"local_ranks_filter"`
	DuplicateStdoutFilters string            `json:"duplicate_stdout_filters"`
	DuplicateStderrFilters string            `json:"duplicate_stderr_filters"`
	NodeRank               int               `json:"node_rank"`
	MasterAddr             string            `json:"master_addr"`
	MasterPort             int               `json:"master_port"`
	LocalAddr              string            `json:"local_addr"`
	LogsSpecs              string            `json:"logs_specs"`
	NumaBinding            string            `json:"numa_binding"`
	SignalsToHandle        string            `json:"signals_to_handle"`
	VirtualLocalRank       bool              `json:"virtual_local_rank"`
	TrainingScript         string            `json:"training_script"`
	TrainingScriptArgs     []string          `json:"training_script_args"`
}

// Options are gorun's own options: how to reach the nodes, what to print,
// whether to check first. They never collide with torchrun's names under
// argparse prefix matching.
type Options struct {
	Hosts        string   // --hosts h1:8,h2:8
	Hostfile     string   // --hostfile FILE (DeepSpeed or MPI form)
	Include      string   // --include, DeepSpeed syntax
	Exclude      string   // --exclude, DeepSpeed syntax
	Env          []string // --env KEY=VALUE, repeatable, in order
	Torchrun     string   // --torchrun CMD: how torchrun starts on a node
	DryRun       bool     // --dry-run
	Format       string   // --format table|json|shell
	Preflight    string   // --preflight on|warn|off
	SSHConfig    string   // --ssh-config FILE
	SSHUser      string   // --ssh-user
	SSHPort      int      // --ssh-port (0: from config, else 22)
	SSHIdentity  string   // --ssh-identity FILE
	KnownHosts   string   // --known-hosts FILE
	SSHAcceptNew bool     // --ssh-accept-new
	SSHCommand   string   // --ssh-command "ssh [OPTIONS]": the system's ssh client in place of Go's
	RemoteGorun  string   // --remote-gorun PATH: an installed gorun on the nodes
	// Launcher (--launcher auto|ssh|srun) is how the head reaches the
	// nodes; auto is srun inside a Slurm allocation when no --hosts or
	// --hostfile is given and srun is on the PATH, ssh otherwise.
	Launcher string
	// PreflightBandwidth (--preflight-bandwidth off|node|all) makes the
	// preflight before a launch move real bytes: every GPU pair, host
	// link and all_reduce on each node (node), and between nodes (all).
	PreflightBandwidth string
	// HangTimeout (--hang-timeout) is how long the whole group may go
	// without progress before the attempt counts as hung; 0 is off.
	// HangAuto (--hang-timeout auto): learn it from earlier runs of the
	// script (internal/hangtime), HangTimeout until something is learned.
	HangTimeout time.Duration
	HangAuto    bool
	// HangTimeoutFloor (--hang-timeout-floor) is the shortest limit a
	// learned one may be.
	HangTimeoutFloor time.Duration
	// FlightRecorder (--flight-recorder DIR) turns on PyTorch's NCCL flight
	// recorder in every worker; the head gathers every rank's dump under
	// DIR after a failed attempt.
	FlightRecorder string
	// TelemetryInterval (--telemetry-interval) is how often each node
	// agent samples its GPUs while the job runs; 0 turns telemetry off.
	TelemetryInterval time.Duration
	// Telemetry (--telemetry FILE) is where every GPU sample is written as
	// JSON Lines; "" writes none.
	Telemetry string
	// Summary (--summary FILE) is where the run's JSON summary is
	// written once it ends (internal/job.Summary); "" writes none.
	Summary string
	// Report (--report FILE.html) is where the run's HTML report is
	// written at the end; "" writes none.
	Report string
	// WarmRestart (--warm-restart on|early|off): on, each node's torchrun
	// for the next attempt is started ahead, its imports done, while an
	// attempt runs, and is handed the first restart's command line then;
	// early starts it with the attempt on every node.
	WarmRestart string
	// StopGrace (--stop-grace) is how long the workers have, after the
	// signal of a stop from outside (SIGTERM or Ctrl-C to gorun, scancel,
	// a pod's deletion), before what is left is killed.
	StopGrace time.Duration
	// ShutdownTimeout is torchrun's --shutdown-timeout as given (0: not
	// given); it sets StopGrace unless --stop-grace is given too.
	ShutdownTimeout time.Duration
	// Prewarm (--prewarm auto|MODULES|off) names the modules that each
	// node's pool of worker interpreters imports ahead, once, for one
	// forked interpreter per local rank; nil (off): every worker starts
	// its own. auto (the default) is torch where the workers are Python scripts (not
	// --no-python, not --run-path), with PrewarmAuto set: the launch then
	// drops the pool for a script it can read that imports none of the
	// modules (job.autoPrewarm), and a node with too few CPUs starts none
	// (wire.Pool.Auto).
	Prewarm     []string
	PrewarmAuto bool
	// PrewarmSkipped says why auto left the pool out, for the plan: set
	// by the launch (job.autoPrewarm), never by parsing.
	PrewarmSkipped string
	// Fanout (--fanout N) is how many nodes the head dials, asks (the
	// checks, the teardown check) or starts at once; 0 (not given):
	// DefaultFanout.
	Fanout int
	// Timestamps (--timestamps) begins each of gorun's own lines on
	// stderr with the time, RFC 3339 with milliseconds; WorkerTimestamps
	// (--worker-timestamps) each line of the nodes (workers, torchrun).
	Timestamps       bool
	WorkerTimestamps bool
	// StepPattern (--step-pattern) recognises a training step in a
	// worker's line by its group "step", in place of the defaults; "off"
	// recognises none. CheckpointPattern (--checkpoint-pattern) does the
	// same for a saved checkpoint. "": the defaults (launch.Steps).
	StepPattern       string
	CheckpointPattern string
}

// PassSignals are the signals gorun passes on to every worker without
// stopping anything: SIGUSR1, SIGUSR2 and the other non-stop signals
// SignalsToHandle names (Parse has checked every name).
func (c Config) PassSignals() []syscall.Signal {
	pass, _ := parseSignals(setting{value: c.SignalsToHandle})
	return pass
}

// DefaultStopGrace is --stop-grace's default: torchrun's own, and
// Kubernetes' terminationGracePeriodSeconds.
const DefaultStopGrace = 30 * time.Second

// DefaultHangTimeout is --hang-timeout's default: longer than PyTorch's own
// NCCL collective timeout (10 min), so torch reports what it can first,
// and as long as gloo's (30 min), so a quiet but healthy job (any line
// from any worker, or a touch of $GORUN_HEARTBEAT_FILE, is progress) is
// never stopped by mistake, while a job stuck where torch never looks (a
// sleep, a Python deadlock, a data loader) no longer hangs forever.
const DefaultHangTimeout = 30 * time.Minute

// DefaultHangTimeoutFloor is --hang-timeout-floor's default: NCCL's own
// collective timeout, so a learned limit never stops a job before torch
// would have reported on it.
const DefaultHangTimeoutFloor = 10 * time.Minute

// DefaultTelemetryInterval is --telemetry-interval's default, and
// MinTelemetryInterval the shortest period accepted: NVML's utilisation
// counters themselves average over 1/6 s to 1 s.
const (
	DefaultTelemetryInterval = time.Second
	MinTelemetryInterval     = 100 * time.Millisecond
)

// Arg is one torchrun option exactly as the user set it, normalised to
// torchrun's canonical dashed name ("--nproc-per-node"). Flags without a value
// have Value "" and IsFlag true.
type Arg struct {
	Name    string // canonical, e.g. "--rdzv-backend"
	Dest    string // argparse dest, e.g. "rdzv_backend"
	Value   string
	IsFlag  bool
	FromEnv bool // set through PET_<DEST> rather than argv
}

// CommandLine is a parsed gorun command line: gorun's options, the effective
// torchrun configuration, and the torchrun options the user set explicitly
// (in the order given), so the plan can pass them through untouched.
type CommandLine struct {
	Gorun    Options
	Torchrun Config
	Given    []Arg
	// Extra are the newer torchrun's options it was parsed with
	// (ParseExtra), for a parse of the same command line again.
	Extra []Extra
}

// Set reports whether the user set the torchrun option with this dest
// ("rdzv_backend"), on the command line or through PET_<DEST>.
func (c *CommandLine) Set(dest string) bool {
	for _, a := range c.Given {
		if a.Dest == dest {
			return true
		}
	}
	return false
}

// MarshalJSON writes the configuration with its fields in order, as the
// struct tags say, except that nproc_per_node is a JSON number when it
// holds an integer, the way torchrun's own LaunchConfig has it, so a
// reader of --format json need not parse "8". Like RenderJSON it leaves
// '<', '>' and '&' unescaped: a plan is read by people and shells, not
// embedded in HTML.
func (c Config) MarshalJSON() ([]byte, error) {
	t, nproc := rawNProcConfig()
	raw := json.RawMessage(strconv.Quote(c.NProcPerNode))
	if _, err := strconv.Atoi(c.NProcPerNode); err == nil {
		raw = json.RawMessage(c.NProcPerNode)
	}
	out := reflect.New(t).Elem()
	in := reflect.ValueOf(c)
	for i := range in.NumField() {
		if i == nproc {
			out.Field(i).Set(reflect.ValueOf(raw))
		} else {
			out.Field(i).Set(in.Field(i))
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out.Interface()); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads what MarshalJSON writes, and also a plan written
// before nproc_per_node became a number: a string there is taken as is.
func (c *Config) UnmarshalJSON(data []byte) error {
	t, nproc := rawNProcConfig()
	in := reflect.New(t)
	if err := json.Unmarshal(data, in.Interface()); err != nil {
		return err
	}
	in = in.Elem()
	var out Config
	ov := reflect.ValueOf(&out).Elem()
	for i := range ov.NumField() {
		if i != nproc {
			ov.Field(i).Set(in.Field(i))
		}
	}
	raw := in.Field(nproc).Interface().(json.RawMessage)
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &out.NProcPerNode); err != nil {
			return fmt.Errorf("nproc_per_node: %w", err)
		}
	default:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("nproc_per_node: %w", err)
		}
		if _, err := strconv.Atoi(n.String()); err != nil {
			return fmt.Errorf("nproc_per_node: %s is not an integer", n)
		}
		out.NProcPerNode = n.String()
	}
	*c = out
	return nil
}

// rawNProcConfig returns Config with NProcPerNode as raw JSON, and that
// field's index: the same fields, names and tags in the same order, so the
// JSON keeps Config's layout and every field added to Config later comes
// along by itself. It is built on each call rather than kept in a package
// variable; a plan is encoded once.
func rawNProcConfig() (reflect.Type, int) {
	t := reflect.TypeFor[Config]()
	fields := make([]reflect.StructField, t.NumField())
	nproc := -1
	for i := range fields {
		fields[i] = t.Field(i)
		if fields[i].Name == "NProcPerNode" {
			nproc = i
			fields[i].Type = reflect.TypeFor[json.RawMessage]()
		}
	}
	return reflect.StructOf(fields), nproc
}
