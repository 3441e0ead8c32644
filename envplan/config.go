package envplan

import "time"

// Config is the effective torchrun configuration, derived exactly as torchrun
// 2.11 derives it (torch/distributed/run.py config_from_args). JSON names are
// torchrun's own config names; this is part of gorun's public --format json
// contract, so fields are only ever added.
type Config struct {
	NNodesMin              int               `json:"nnodes_min"`
	NNodesMax              int               `json:"nnodes_max"`
	NProcPerNode           string            `json:"nproc_per_node"` // an integer, or auto|cpu|gpu|xpu as given
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
	RemoteGorun  string   // --remote-gorun PATH: an installed gorun on the nodes
	// HangTimeout (--hang-timeout) is how long the whole group may go
	// without progress before the attempt counts as hung; 0 is off.
	HangTimeout time.Duration
	// FlightRecorder (--flight-recorder DIR) turns on PyTorch's NCCL flight
	// recorder in every worker; the head gathers every rank's dump under
	// DIR after a failed attempt.
	FlightRecorder string
}

// DefaultHangTimeout is --hang-timeout's default: longer than PyTorch's own
// NCCL collective timeout (10 min), so torch reports what it can first,
// and as long as gloo's (30 min), so a quiet but healthy job (any line
// from any worker, or a touch of $GORUN_HEARTBEAT_FILE, is progress) is
// never stopped by mistake, while a job stuck where torch never looks (a
// sleep, a Python deadlock, a data loader) no longer hangs forever.
const DefaultHangTimeout = 30 * time.Minute

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
