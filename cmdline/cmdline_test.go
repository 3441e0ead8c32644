package cmdline

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorun/gorun/internal/userr"
)

// defaultConfig is torchrun 2.11's configuration for `torchrun SCRIPT ARGS...`
// with no options and no PET_ variables.
func defaultConfig(script string, args ...string) Config {
	if args == nil {
		args = []string{}
	}
	return Config{
		NNodesMin:          1,
		NNodesMax:          1,
		NProcPerNode:       "1",
		RdzvBackend:        "static",
		RdzvEndpoint:       "127.0.0.1:29500",
		RdzvID:             "none",
		RdzvConfigs:        map[string]string{"rank": "0", "timeout": "900"},
		MonitorInterval:    0.1,
		StartMethod:        "spawn",
		EventLogHandler:    "null",
		Role:               "default",
		Redirects:          "0",
		Tee:                "0",
		MasterAddr:         "127.0.0.1",
		MasterPort:         29500,
		SignalsToHandle:    "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
		TrainingScript:     script,
		TrainingScriptArgs: args,
	}
}

func defaultOptions() Options {
	return Options{Torchrun: "torchrun", Format: "table", Preflight: "on", Launcher: "auto", HangTimeout: DefaultHangTimeout, HangTimeoutFloor: DefaultHangTimeoutFloor, TelemetryInterval: DefaultTelemetryInterval, WarmRestart: "on", StopGrace: DefaultStopGrace, Prewarm: []string{"torch"}, PrewarmAuto: true}
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func fixedID() string { return "11111111-2222-4333-8444-555555555555" }

type okCase struct {
	name  string
	argv  []string
	env   map[string]string
	cfg   func(c *Config) // changes to defaultConfig("train.py")
	opts  func(o *Options)
	given []Arg // nil: not checked
}

func TestParseAccepts(t *testing.T) {
	cases := []okCase{
		{name: "defaults", argv: []string{"train.py"}, given: []Arg{}},
		{
			name: "job script line",
			argv: []string{"--nproc-per-node=8", "train.py", "--lr", "3e-4"},
			cfg: func(c *Config) {
				c.NProcPerNode = "8"
				c.TrainingScriptArgs = []string{"--lr", "3e-4"}
			},
			given: []Arg{{Name: "--nproc-per-node", Dest: "nproc_per_node", Value: "8"}},
		},
		{
			name:  "underscore spelling with a separate value",
			argv:  []string{"--nproc_per_node", "4", "train.py"},
			cfg:   func(c *Config) { c.NProcPerNode = "4" },
			given: []Arg{{Name: "--nproc-per-node", Dest: "nproc_per_node", Value: "4"}},
		},
		{
			// argparse calls this ambiguous (two spellings of one option);
			// gorun resolves it.
			name:  "prefix matching one spelling of one option",
			argv:  []string{"--nproc-p", "2", "train.py"},
			cfg:   func(c *Config) { c.NProcPerNode = "2" },
			given: []Arg{{Name: "--nproc-per-node", Dest: "nproc_per_node", Value: "2"}},
		},
		{
			name:  "prefix of an underscore spelling",
			argv:  []string{"--nproc_p=3", "train.py"},
			cfg:   func(c *Config) { c.NProcPerNode = "3" },
			given: []Arg{{Name: "--nproc-per-node", Dest: "nproc_per_node", Value: "3"}},
		},
		{name: "nproc words", argv: []string{"--nproc-per-node", "gpu", "train.py"}, cfg: func(c *Config) { c.NProcPerNode = "gpu" }},
		{name: "nproc auto", argv: []string{"--nproc-per-node=auto", "train.py"}, cfg: func(c *Config) { c.NProcPerNode = "auto" }},
		{name: "nproc int written as Python accepts it", argv: []string{"--nproc-per-node= +0_8 ", "train.py"}, cfg: func(c *Config) { c.NProcPerNode = "8" }},
		{name: "nnodes range", argv: []string{"--nnodes", "2:4", "train.py"}, cfg: func(c *Config) { c.NNodesMin, c.NNodesMax = 2, 4 }},
		{name: "nnodes single", argv: []string{"--nnodes=3", "train.py"}, cfg: func(c *Config) { c.NNodesMin, c.NNodesMax = 3, 3 }},
		{name: "nnodes with spaces and underscores", argv: []string{"--nnodes", " 1_0 : 12 ", "train.py"}, cfg: func(c *Config) { c.NNodesMin, c.NNodesMax = 10, 12 }},
		{name: "nnodes prefix", argv: []string{"--nn", "2", "train.py"}, cfg: func(c *Config) { c.NNodesMin, c.NNodesMax = 2, 2 }},
		{
			name:  "prefix --redirect",
			argv:  []string{"--redirect", "3", "train.py"},
			cfg:   func(c *Config) { c.Redirects = "3" },
			given: []Arg{{Name: "--redirects", Dest: "redirects", Value: "3"}},
		},
		{name: "-r VALUE", argv: []string{"-r", "3", "train.py"}, cfg: func(c *Config) { c.Redirects = "3" }},
		{name: "-r3", argv: []string{"-r3", "train.py"}, cfg: func(c *Config) { c.Redirects = "3" }, given: []Arg{{Name: "--redirects", Dest: "redirects", Value: "3"}}},
		{name: "-r=3", argv: []string{"-r=3", "train.py"}, cfg: func(c *Config) { c.Redirects = "3" }},
		{name: "-r mapping", argv: []string{"-r", "0:1,1:2", "train.py"}, cfg: func(c *Config) { c.Redirects = "0:1,1:2" }},
		{name: "-t VALUE", argv: []string{"-t", "3", "train.py"}, cfg: func(c *Config) { c.Tee = "3" }},
		{name: "-t0:3", argv: []string{"-t0:3", "train.py"}, cfg: func(c *Config) { c.Tee = "0:3" }},
		{name: "--tee=", argv: []string{"--tee=2", "train.py"}, cfg: func(c *Config) { c.Tee = "2" }},
		{
			name:  "-m",
			argv:  []string{"-m", "pkg.train"},
			cfg:   func(c *Config) { c.Module = true; c.TrainingScript = "pkg.train" },
			given: []Arg{{Name: "--module", Dest: "module", IsFlag: true}},
		},
		{name: "--module", argv: []string{"--module", "train.py"}, cfg: func(c *Config) { c.Module = true }},
		{
			name: "short flags chained with a value",
			argv: []string{"-mr3", "train.py"},
			cfg:  func(c *Config) { c.Module = true; c.Redirects = "3" },
			given: []Arg{
				{Name: "--module", Dest: "module", IsFlag: true},
				{Name: "--redirects", Dest: "redirects", Value: "3"},
			},
		},
		{name: "short flags chained, value in the next argument", argv: []string{"-mt", "1", "train.py"}, cfg: func(c *Config) { c.Module = true; c.Tee = "1" }},
		{name: "short flags chained with =", argv: []string{"-mr=2", "train.py"}, cfg: func(c *Config) { c.Module = true; c.Redirects = "2" }},
		{name: "-mm", argv: []string{"-mm", "train.py"}, cfg: func(c *Config) { c.Module = true }},
		{
			name: "standalone replaces the rendezvous",
			argv: []string{"--rdzv-backend=etcd", "--rdzv-endpoint", "h:1", "--rdzv-id", "j", "--standalone", "train.py"},
			cfg: func(c *Config) {
				c.Standalone = true
				c.RdzvBackend, c.RdzvEndpoint, c.RdzvID = "c10d", "localhost:0", fixedID()
				c.RdzvConfigs = map[string]string{"timeout": "900"}
			},
			given: []Arg{
				{Name: "--rdzv-backend", Dest: "rdzv_backend", Value: "etcd"},
				{Name: "--rdzv-endpoint", Dest: "rdzv_endpoint", Value: "h:1"},
				{Name: "--rdzv-id", Dest: "rdzv_id", Value: "j"},
				{Name: "--standalone", Dest: "standalone", IsFlag: true},
			},
		},
		{
			name: "static rendezvous config gets the node rank",
			argv: []string{"--rdzv_conf", " join_timeout = 900 ,rank=5", "--node_rank", "1", "--nnodes", "2", "train.py"},
			cfg: func(c *Config) {
				c.RdzvConfigs = map[string]string{"join_timeout": "900", "rank": "1", "timeout": "900"}
				c.NodeRank = 1
				c.NNodesMin, c.NNodesMax = 2, 2
			},
		},
		{
			name: "c10d keeps its endpoint and gets no rank",
			argv: []string{"--rdzv-backend", "c10d", "--rdzv-endpoint", "node1:29400", "--rdzv-id", "42", "--rdzv-conf=read_timeout=60", "train.py"},
			cfg: func(c *Config) {
				c.RdzvBackend, c.RdzvEndpoint, c.RdzvID = "c10d", "node1:29400", "42"
				c.RdzvConfigs = map[string]string{"read_timeout": "60", "timeout": "900"}
			},
		},
		{
			name: "a timeout in --rdzv-conf replaces torchrun's 900 s",
			argv: []string{"--rdzv-conf", "timeout=60", "--rdzv-backend=c10d", "train.py"},
			cfg: func(c *Config) {
				c.RdzvBackend, c.RdzvEndpoint = "c10d", ""
				c.RdzvConfigs = map[string]string{"timeout": "60"}
			},
		},
		{
			name: "c10d without endpoint stays empty",
			argv: []string{"--rdzv-backend=c10d", "train.py"},
			cfg: func(c *Config) {
				c.RdzvBackend, c.RdzvEndpoint = "c10d", ""
				c.RdzvConfigs = map[string]string{"timeout": "900"}
			},
		},
		{
			name: "static endpoint from master address and port",
			argv: []string{"--master-addr", "10.0.0.1", "--master_port=1234", "train.py"},
			cfg: func(c *Config) {
				c.MasterAddr, c.MasterPort, c.RdzvEndpoint = "10.0.0.1", 1234, "10.0.0.1:1234"
			},
		},
		{name: "static with an explicit endpoint", argv: []string{"--rdzv-endpoint=h:5", "train.py"}, cfg: func(c *Config) { c.RdzvEndpoint = "h:5" }},
		{
			name: "a value starting with '-' in the = form",
			argv: []string{"--master-addr=-x", "train.py"},
			cfg:  func(c *Config) { c.MasterAddr, c.RdzvEndpoint = "-x", "-x:29500" },
		},
		{name: "a negative number is a value", argv: []string{"--role", "-1", "train.py"}, cfg: func(c *Config) { c.Role = "-1" }},
		{name: "empty value in the = form", argv: []string{"--role=", "train.py"}, cfg: func(c *Config) { c.Role = "" }},
		{
			name: "every other torchrun option",
			argv: []string{
				"--max-restarts", "3", "--monitor-interval", "0.5", "--start-method", "fork",
				"--event-log-handler", "console", "--role", "trainer", "--no-python", "--run-path",
				"--log-dir", "/tmp/l", "--local-ranks-filter", "0,1,2", "--duplicate-stdout-filters", "loss,acc",
				"--duplicate-stderr-filters", "err", "--local-addr", "10.1.1.1", "--logs-specs", "mine",
				"--numa-binding", "core-complex", "--signals-to-handle", "SIGTERM,SIGUSR1", "--virtual-local-rank",
				"./run.sh", "a",
			},
			cfg: func(c *Config) {
				c.MaxRestarts, c.MonitorInterval, c.StartMethod = 3, 0.5, "fork"
				c.EventLogHandler, c.Role, c.NoPython, c.RunPath = "console", "trainer", true, true
				c.LogDir, c.LocalRanksFilter = "/tmp/l", "0,1,2"
				c.DuplicateStdoutFilters, c.DuplicateStderrFilters = "loss,acc", "err"
				c.LocalAddr, c.LogsSpecs, c.NumaBinding = "10.1.1.1", "mine", "core-complex"
				c.SignalsToHandle, c.VirtualLocalRank = "SIGTERM,SIGUSR1", true
				c.TrainingScript, c.TrainingScriptArgs = "./run.sh", []string{"a"}
			},
			opts: func(o *Options) { o.Prewarm = nil }, // --prewarm auto: no Python worker to warm
		},
		{name: "monitor interval with exponent", argv: []string{"--monitor-interval=1e-1", "train.py"}, cfg: func(c *Config) { c.MonitorInterval = 0.1 }},
		{name: "monitor interval integer", argv: []string{"--monitor_interval", "2", "train.py"}, cfg: func(c *Config) { c.MonitorInterval = 2 }},
		{
			name: "run-path takes precedence over no-python with module",
			argv: []string{"--run-path", "--no-python", "-m", "/abs/t.py"},
			cfg:  func(c *Config) { c.RunPath, c.NoPython, c.Module, c.TrainingScript = true, true, true, "/abs/t.py" },
			opts: func(o *Options) { o.Prewarm = nil },
		},
		{
			name:  "options after the script belong to the script",
			argv:  []string{"train.py", "--nnodes", "3", "-h", "--rdzv", "--bogus", "--"},
			cfg:   func(c *Config) { c.TrainingScriptArgs = []string{"--nnodes", "3", "-h", "--rdzv", "--bogus", "--"} },
			given: []Arg{},
		},
		{name: "-- ends the options", argv: []string{"--", "train.py", "--x"}, cfg: func(c *Config) { c.TrainingScriptArgs = []string{"--x"} }},
		{name: "-- right after the script is dropped, as argparse does", argv: []string{"train.py", "--", "--x"}, cfg: func(c *Config) { c.TrainingScriptArgs = []string{"--x"} }},
		{name: "a later -- is kept", argv: []string{"train.py", "a", "--", "b"}, cfg: func(c *Config) { c.TrainingScriptArgs = []string{"a", "--", "b"} }},
		{name: "a second -- after -- script is kept", argv: []string{"--", "train.py", "--", "b"}, cfg: func(c *Config) { c.TrainingScriptArgs = []string{"--", "b"} }},
		{name: "-- then -- makes -- the script", argv: []string{"--", "--", "x"}, cfg: func(c *Config) { c.TrainingScript, c.TrainingScriptArgs = "--", []string{"x"} }},
		{name: "a dash script after --", argv: []string{"--nnodes=2", "--", "-x"}, cfg: func(c *Config) { c.NNodesMin, c.NNodesMax, c.TrainingScript = 2, 2, "-x" }},
		{name: "a negative number is the script", argv: []string{"-1"}, cfg: func(c *Config) { c.TrainingScript = "-1" }},
		{name: "a dash string with a space is the script", argv: []string{"-x y"}, cfg: func(c *Config) { c.TrainingScript = "-x y" }},
		{name: "a lone dash is the script", argv: []string{"-"}, cfg: func(c *Config) { c.TrainingScript = "-" }},
		{
			name: "repeating an option: the last one wins",
			argv: []string{"--nnodes", "2", "--nnodes=3", "train.py"},
			cfg:  func(c *Config) { c.NNodesMin, c.NNodesMax = 3, 3 },
			given: []Arg{
				{Name: "--nnodes", Dest: "nnodes", Value: "2"},
				{Name: "--nnodes", Dest: "nnodes", Value: "3"},
			},
		},
		{
			name: "PET_ defaults",
			argv: []string{"train.py"},
			env:  map[string]string{"PET_NNODES": "1:2", "PET_NPROC_PER_NODE": "4", "PET_MASTER_ADDR": "10.0.0.9", "PET_MAX_RESTARTS": "2", "PET_RDZV_CONF": "a=b"},
			cfg: func(c *Config) {
				c.NNodesMin, c.NNodesMax, c.NProcPerNode = 1, 2, "4"
				c.MasterAddr, c.RdzvEndpoint, c.MaxRestarts = "10.0.0.9", "10.0.0.9:29500", 2
				c.RdzvConfigs = map[string]string{"a": "b", "rank": "0", "timeout": "900"}
			},
			// in torchrun's declaration order, not the environment's
			given: []Arg{
				{Name: "--nnodes", Dest: "nnodes", Value: "1:2", FromEnv: true},
				{Name: "--nproc-per-node", Dest: "nproc_per_node", Value: "4", FromEnv: true},
				{Name: "--rdzv-conf", Dest: "rdzv_conf", Value: "a=b", FromEnv: true},
				{Name: "--max-restarts", Dest: "max_restarts", Value: "2", FromEnv: true},
				{Name: "--master-addr", Dest: "master_addr", Value: "10.0.0.9", FromEnv: true},
			},
		},
		{
			name: "argv wins over PET_",
			argv: []string{"--nnodes", "3", "train.py"},
			env:  map[string]string{"PET_NNODES": "2", "PET_TEE": "1"},
			cfg:  func(c *Config) { c.NNodesMin, c.NNodesMax, c.Tee = 3, 3, "1" },
			given: []Arg{
				{Name: "--tee", Dest: "tee", Value: "1", FromEnv: true},
				{Name: "--nnodes", Dest: "nnodes", Value: "3"},
			},
		},
		{
			name: "a bad PET_ value overridden on argv is never read",
			argv: []string{"--max-restarts=1", "train.py"},
			env:  map[string]string{"PET_MAX_RESTARTS": "many"},
			cfg:  func(c *Config) { c.MaxRestarts = 1 },
		},
		{
			name:  "PET_STANDALONE=1",
			argv:  []string{"train.py"},
			env:   map[string]string{"PET_STANDALONE": "1"},
			cfg:   standalone,
			given: []Arg{{Name: "--standalone", Dest: "standalone", IsFlag: true, FromEnv: true}},
		},
		{name: "PET_STANDALONE=0", argv: []string{"train.py"}, env: map[string]string{"PET_STANDALONE": "0"}, given: []Arg{}},
		{name: "PET_STANDALONE=00 is false", argv: []string{"train.py"}, env: map[string]string{"PET_STANDALONE": "00"}},
		{name: "PET_STANDALONE=' 2 ' is true", argv: []string{"train.py"}, env: map[string]string{"PET_STANDALONE": " 2 "}, cfg: standalone},
		{name: "PET_STANDALONE=-1 is true", argv: []string{"train.py"}, env: map[string]string{"PET_STANDALONE": "-1"}, cfg: standalone},
		{
			name:  "PET_STANDALONE=0 with --standalone",
			argv:  []string{"--standalone", "train.py"},
			env:   map[string]string{"PET_STANDALONE": "0"},
			cfg:   standalone,
			given: []Arg{{Name: "--standalone", Dest: "standalone", IsFlag: true}},
		},
		{name: "PET_MODULE", argv: []string{"pkg"}, env: map[string]string{"PET_MODULE": "1"}, cfg: func(c *Config) { c.Module, c.TrainingScript = true, "pkg" }},
		{name: "PET_VIRTUAL_LOCAL_RANK", argv: []string{"train.py"}, env: map[string]string{"PET_VIRTUAL_LOCAL_RANK": "1"}, cfg: func(c *Config) { c.VirtualLocalRank = true }},
		{name: "PET_LOGS_SPECS and PET_NUMA_BINDING are not read", argv: []string{"train.py"}, env: map[string]string{"PET_LOGS_SPECS": "x", "PET_NUMA_BINDING": "node"}, given: []Arg{}},
		{name: "PET_START_METHOD", argv: []string{"train.py"}, env: map[string]string{"PET_START_METHOD": "forkserver"}, cfg: func(c *Config) { c.StartMethod = "forkserver" }},
		{name: "GORUN_ variables are not read", argv: []string{"train.py"}, env: map[string]string{"GORUN_FORMAT": "json", "PET_FORMAT": "json"}},
		{
			name: "every gorun option",
			argv: []string{
				"--hosts", "a:8,b:8", "--hostfile=hf", "--include", "a:0,1", "--env", "A=1", "--env=B=",
				"--torchrun", "python -m torch.distributed.run", "--dry-run", "--format", "json", "--preflight=warn",
				"--ssh-config", "cfg", "--ssh-user", "me", "--ssh-port", "2222", "--ssh-identity", "id",
				"--known-hosts", "kh", "--ssh-accept-new", "--remote-gorun", "/opt/gorun", "--hang-timeout", "90",
				"--launcher", "srun", "--telemetry", "t.jsonl", "--telemetry-interval=500ms", "--report", "r.html",
				"--warm-restart", "off", "--nnodes", "2", "train.py",
			},
			cfg: func(c *Config) { c.NNodesMin, c.NNodesMax = 2, 2 },
			opts: func(o *Options) {
				*o = Options{
					Hosts: "a:8,b:8", Hostfile: "hf", Include: "a:0,1", Env: []string{"A=1", "B="},
					Torchrun: "python -m torch.distributed.run", DryRun: true, Format: "json", Preflight: "warn",
					SSHConfig: "cfg", SSHUser: "me", SSHPort: 2222, SSHIdentity: "id", KnownHosts: "kh",
					SSHAcceptNew: true, RemoteGorun: "/opt/gorun", Launcher: "srun", HangTimeout: 90 * time.Second, HangTimeoutFloor: DefaultHangTimeoutFloor,
					Telemetry: "t.jsonl", TelemetryInterval: 500 * time.Millisecond, Report: "r.html", WarmRestart: "off", StopGrace: DefaultStopGrace,
					Prewarm: []string{"torch"}, PrewarmAuto: true,
				}
			},
			given: []Arg{{Name: "--nnodes", Dest: "nnodes", Value: "2"}},
		},
		{
			name: "gorun prefixes",
			argv: []string{"--dry", "--hostf", "h", "--form=shell", "--exc", "n1", "--ssh-a", "train.py"},
			opts: func(o *Options) {
				o.DryRun, o.Hostfile, o.Format, o.Exclude, o.SSHAcceptNew = true, "h", "shell", "n1", true
			},
			given: []Arg{},
		},
		{name: "fanout", argv: []string{"--fanout", "128", "train.py"}, opts: func(o *Options) { o.Fanout = 128 }},
		{name: "prewarm modules", argv: []string{"--prewarm", "torch, numpy.linalg", "train.py"}, opts: func(o *Options) { o.Prewarm, o.PrewarmAuto = []string{"torch", "numpy.linalg"}, false }},
		{name: "prewarm auto", argv: []string{"--prewarm", "auto", "train.py"}, opts: func(o *Options) { o.Prewarm, o.PrewarmAuto = []string{"torch"}, true }},
		{name: "prewarm auto with no-python", argv: []string{"--prewarm", "auto", "--no-python", "true"}, cfg: func(c *Config) { c.NoPython, c.TrainingScript = true, "true" }, opts: func(o *Options) { o.Prewarm = nil }},
		{name: "prewarm off after modules", argv: []string{"--prewarm", "torch", "--prewarm", "off", "--no-python", "true"}, cfg: func(c *Config) { c.NoPython, c.TrainingScript = true, "true" }, opts: func(o *Options) { o.Prewarm, o.PrewarmAuto = nil, false }},
		{name: "warm restart early", argv: []string{"--warm-restart", "early", "train.py"}, opts: func(o *Options) { o.WarmRestart = "early" }},
		{name: "hang timeout learned", argv: []string{"--hang-timeout", "auto", "--hang-timeout-floor", "90s", "train.py"}, opts: func(o *Options) { o.HangAuto, o.HangTimeoutFloor = true, 90*time.Second }},
		{name: "hang timeout given after auto", argv: []string{"--hang-timeout", "auto", "--hang-timeout", "1h", "train.py"}, opts: func(o *Options) { o.HangTimeout = time.Hour }},
		{name: "gorun repeated: last wins", argv: []string{"--dry-run", "--format", "json", "--format", "table", "train.py"}, opts: func(o *Options) { o.DryRun = true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseWith(tc.argv, envOf(tc.env), fixedID)
			if err != nil {
				t.Fatalf("ParseWith(%q): %v", tc.argv, err)
			}
			want := defaultConfig("train.py")
			if tc.cfg != nil {
				tc.cfg(&want)
			}
			if !reflect.DeepEqual(got.Torchrun, want) {
				t.Errorf("config\n got %+v\nwant %+v", got.Torchrun, want)
			}
			wantOpts := defaultOptions()
			if tc.opts != nil {
				tc.opts(&wantOpts)
			}
			if !reflect.DeepEqual(got.Gorun, wantOpts) {
				t.Errorf("gorun options\n got %+v\nwant %+v", got.Gorun, wantOpts)
			}
			if tc.given != nil && !reflect.DeepEqual(got.Given, tc.given) {
				t.Errorf("given\n got %+v\nwant %+v", got.Given, tc.given)
			}
			if got.Torchrun.TrainingScriptArgs == nil || got.Given == nil {
				t.Errorf("nil slice in output: args %v given %v", got.Torchrun.TrainingScriptArgs == nil, got.Given == nil)
			}
		})
	}
}

func standalone(c *Config) {
	c.Standalone = true
	c.RdzvBackend, c.RdzvEndpoint, c.RdzvID = "c10d", "localhost:0", fixedID()
	c.RdzvConfigs = map[string]string{"timeout": "900"}
}

type errCase struct {
	name    string
	argv    []string
	env     map[string]string
	where   string
	problem string // a substring of Problem
}

func TestParseRefuses(t *testing.T) {
	cases := []errCase{
		{name: "ambiguous rdzv", argv: []string{"--rdzv", "x", "train.py"}, where: "--rdzv", problem: "--rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf"},
		{name: "format without dry-run", argv: []string{"--format", "json", "train.py"}, where: "--format", problem: "--dry-run was not given"},
		{name: "format= without dry-run", argv: []string{"--format=shell", "train.py"}, where: "--format", problem: "--dry-run was not given"},
		{name: "ambiguous with =", argv: []string{"--master=h", "train.py"}, where: "--master", problem: "--master-addr, --master-port"},
		{name: "ambiguous no", argv: []string{"--no", "train.py"}, where: "--no", problem: "--no-python, --node-rank"},
		{name: "ambiguous log", argv: []string{"--log", "d", "train.py"}, where: "--log", problem: "--log-dir, --logs-specs"},
		{name: "ambiguous gorun ho", argv: []string{"--ho", "x", "train.py"}, where: "--ho", problem: "--hosts, --hostfile"},
		{name: "ambiguous --h now that gorun has --hosts", argv: []string{"--h", "train.py"}, where: "--h", problem: "--help, --hosts, --hostfile"},
		{name: "ambiguous --e now that gorun has --env", argv: []string{"--e", "x", "train.py"}, where: "--e", problem: "--event-log-handler, --exclude, --env"},
		{name: "ambiguous --t now that gorun has --torchrun", argv: []string{"--t", "1", "train.py"}, where: "--t", problem: "--tee, --torchrun"},
		{name: "ambiguous --re now that gorun has --remote-gorun", argv: []string{"--re", "1", "train.py"}, where: "--re", problem: "--redirects, --remote-gorun"},
		{name: "ambiguous bare --=", argv: []string{"--=x", "train.py"}, where: "--", problem: "could match --help, --nnodes"},
		{name: "value starting with dash", argv: []string{"--master-addr", "-x", "train.py"}, where: "--master-addr", problem: "expected one argument"},
		{name: "value is an option", argv: []string{"--nnodes", "--standalone", "train.py"}, where: "--nnodes", problem: "expected one argument"},
		{name: "value is --", argv: []string{"--nnodes", "--", "train.py"}, where: "--nnodes", problem: "expected one argument"},
		{name: "value missing at the end", argv: []string{"--nnodes"}, where: "--nnodes", problem: "expected one argument"},
		{name: "short option missing its value", argv: []string{"-r"}, where: "-r", problem: "expected one argument"},
		{name: "prefix missing its value", argv: []string{"--nproc-p", "-h"}, where: "--nproc-p", problem: "expected one argument"},
		{name: "prefix of both spellings of one option, as argparse", argv: []string{"--nproc", "2", "train.py"}, where: "--nproc",
			problem: "ambiguous option: could match --nproc-per-node, --nproc_per_node"},
		{name: "prefix of both spellings of --max-restarts", argv: []string{"--max", "2", "train.py"}, where: "--max",
			problem: "ambiguous option: could match --max-restarts, --max_restarts"},
		{name: "gorun option missing its value", argv: []string{"--hosts", "--nnodes", "2", "x"}, where: "--hosts", problem: "expected one argument"},
		{name: "nnodes three parts", argv: []string{"--nnodes", "2:20:30", "train.py"}, where: "--nnodes", problem: `nnodes=2:20:30 is not in "MIN:MAX" format`},
		{name: "nnodes zero", argv: []string{"--nnodes=0", "train.py"}, where: "--nnodes", problem: "at least 1"},
		{name: "nnodes zero minimum", argv: []string{"--nnodes=0:2", "train.py"}, where: "--nnodes", problem: "at least 1"},
		{name: "nnodes min above max", argv: []string{"--nnodes", "3:2", "train.py"}, where: "--nnodes", problem: "larger than the maximum"},
		{name: "nnodes not a number", argv: []string{"--nnodes", "two", "train.py"}, where: "--nnodes", problem: "not a whole number"},
		{name: "nnodes open range", argv: []string{"--nnodes", "1:", "train.py"}, where: "--nnodes", problem: "not a whole number"},
		{name: "nnodes negative", argv: []string{"--nnodes", "-2", "train.py"}, where: "--nnodes", problem: "at least 1"},
		{name: "nnodes as typed", argv: []string{"--nnod=1:2:3", "train.py"}, where: "--nnod", problem: "MIN:MAX"},
		{name: "nnodes from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_NNODES": "0"}, where: "PET_NNODES", problem: "at least 1"},
		{name: "nproc word", argv: []string{"--nproc-per-node", "tpu", "train.py"}, where: "--nproc-per-node", problem: `unsupported nproc_per_node value: "tpu"`},
		{name: "nproc case matters", argv: []string{"--nproc-per-node", "GPU", "train.py"}, where: "--nproc-per-node", problem: "unsupported"},
		{name: "nproc zero", argv: []string{"--nproc_per_node=0", "train.py"}, where: "--nproc_per_node", problem: "not possible"},
		{name: "nproc negative", argv: []string{"--nproc-per-node", "-1", "train.py"}, where: "--nproc-per-node", problem: "not possible"},
		{name: "nproc from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_NPROC_PER_NODE": "many"}, where: "PET_NPROC_PER_NODE", problem: "unsupported"},
		{name: "max restarts not int", argv: []string{"--max-restarts", "x", "train.py"}, where: "--max-restarts", problem: `invalid int value: "x"`},
		{name: "max restarts float", argv: []string{"--max-restarts", "1.5", "train.py"}, where: "--max-restarts", problem: "invalid int value"},
		{name: "max restarts negative", argv: []string{"--max-restarts=-1", "train.py"}, where: "--max-restarts", problem: "out of range"},
		{name: "max restarts from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_MAX_RESTARTS": "x"}, where: "PET_MAX_RESTARTS", problem: "invalid int value"},
		{name: "monitor interval word", argv: []string{"--monitor-interval", "fast", "train.py"}, where: "--monitor-interval", problem: "invalid float value"},
		{name: "monitor interval hex", argv: []string{"--monitor-interval", "0x1p-2", "train.py"}, where: "--monitor-interval", problem: "invalid float value"},
		{name: "monitor interval nan", argv: []string{"--monitor-interval", "nan", "train.py"}, where: "--monitor-interval", problem: "not a usable interval"},
		{name: "monitor interval negative", argv: []string{"--monitor-interval=-1", "train.py"}, where: "--monitor-interval", problem: "not a usable interval"},
		{name: "start method", argv: []string{"--start-method", "thread", "train.py"}, where: "--start-method", problem: `invalid choice: "thread"`},
		{name: "start method from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_START_METHOD": "thread"}, where: "PET_START_METHOD", problem: "invalid choice"},
		{name: "numa binding", argv: []string{"--numa_binding", "all", "train.py"}, where: "--numa_binding", problem: "invalid choice"},
		{name: "redirects digit", argv: []string{"-r", "4", "train.py"}, where: "-r", problem: "not a stream selector"},
		{name: "redirects mapping value", argv: []string{"-r0:4", "train.py"}, where: "-r", problem: "not a stream selector"},
		{name: "redirects two-digit rank", argv: []string{"--redirects", "10:1", "train.py"}, where: "--redirects", problem: "not a stream selector"},
		{name: "redirects trailing comma", argv: []string{"--redirects", "0:1,", "train.py"}, where: "--redirects", problem: "not a stream selector"},
		{name: "tee", argv: []string{"-t", "all", "train.py"}, where: "-t", problem: "not a stream selector"},
		{name: "tee from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_TEE": "9"}, where: "PET_TEE", problem: "not a stream selector"},
		{name: "local ranks filter", argv: []string{"--local-ranks-filter", "0,a", "train.py"}, where: "--local-ranks-filter", problem: "comma-separated list of integers"},
		{name: "local ranks filter empty item", argv: []string{"--local_ranks_filter=0,,1", "train.py"}, where: "--local_ranks_filter", problem: "comma-separated"},
		{name: "rdzv conf without value", argv: []string{"--rdzv-conf", "timeout", "train.py"}, where: "--rdzv-conf", problem: "'timeout' must have a value"},
		{name: "rdzv conf empty value", argv: []string{"--rdzv-conf", "a=1,b= ", "train.py"}, where: "--rdzv-conf", problem: "'b' must have a value"},
		{name: "rdzv conf without key", argv: []string{"--rdzv-conf", "=1", "train.py"}, where: "--rdzv-conf", problem: "must be in format"},
		{name: "rdzv conf empty pair", argv: []string{"--rdzv-conf", "a=1,,b=2", "train.py"}, where: "--rdzv-conf", problem: "must be in format"},
		{name: "master port range", argv: []string{"--master-port", "70000", "train.py"}, where: "--master-port", problem: "out of range"},
		{name: "master port word", argv: []string{"--master_port", "http", "train.py"}, where: "--master_port", problem: "invalid int value"},
		{name: "master port zero", argv: []string{"--master-port", "0", "train.py"}, where: "--master-port", problem: "port 0"},
		{name: "master port zero as Python writes it", argv: []string{"--master-port=00", "train.py"}, where: "--master-port", problem: "port 0"},
		{name: "master port negative", argv: []string{"--master-port=-1", "train.py"}, where: "--master-port", problem: "out of range"},
		{name: "master port 65536", argv: []string{"--master-port", "65536", "train.py"}, where: "--master-port", problem: "out of range"},
		{name: "master port zero from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_MASTER_PORT": "0"}, where: "PET_MASTER_PORT", problem: "port 0"},
		{name: "master addr empty", argv: []string{"--master-addr", "", "train.py"}, where: "--master-addr", problem: "master address is empty"},
		{name: "master addr empty in = form", argv: []string{"--master_addr=", "train.py"}, where: "--master_addr", problem: "master address is empty"},
		{name: "master addr blank", argv: []string{"--master-addr", " ", "train.py"}, where: "--master-addr", problem: "master address is empty"},
		{name: "node rank negative", argv: []string{"--node-rank", "-1", "train.py"}, where: "--node-rank", problem: "out of range"},
		{name: "node rank from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_NODE_RANK": "first"}, where: "PET_NODE_RANK", problem: "invalid int value"},
		{name: "no-python with module", argv: []string{"--no-python", "-m", "pkg"}, where: "--no-python", problem: "Don't use both the '--no-python' flag and the '--module' flag at the same time."},
		{name: "no-python from PET_ with module", argv: []string{"-m", "pkg"}, env: map[string]string{"PET_NO_PYTHON": "1"}, where: "PET_NO_PYTHON", problem: "Don't use both"},
		{name: "fanout zero", argv: []string{"--fanout", "0", "train.py"}, where: "--fanout", problem: `"0" is not a node count from 1 to 4096`},
		{name: "fanout not a number", argv: []string{"--fanout=lots", "train.py"}, where: "--fanout", problem: "is not a node count"},
		{name: "fanout too large", argv: []string{"--fanout", "5000", "train.py"}, where: "--fanout", problem: "is not a node count"},
		{name: "prewarm not a module", argv: []string{"--prewarm", "torch,1np", "train.py"}, where: "--prewarm", problem: `"1np" is not a Python module name`},
		{name: "prewarm empty module", argv: []string{"--prewarm", "torch,", "train.py"}, where: "--prewarm", problem: "is not a Python module name"},
		{name: "prewarm with no-python", argv: []string{"--prewarm", "torch", "--no-python", "true"}, where: "--prewarm", problem: "--no-python means"},
		{name: "prewarm with run-path", argv: []string{"--prew=torch", "--run-path", "t.py"}, where: "--prew", problem: "--run-path means"},
		{name: "no script", argv: []string{}, where: "training_script", problem: "missing"},
		{name: "no script after options", argv: []string{"--nnodes", "2", "-m"}, where: "training_script", problem: "missing"},
		{name: "only --", argv: []string{"--"}, where: "training_script", problem: "missing"},
		{name: "empty script", argv: []string{""}, where: "training_script", problem: "empty"},
		{name: "unknown option", argv: []string{"--bogus", "train.py"}, where: "--bogus", problem: "unrecognized arguments: --bogus"},
		{name: "unknown options listed", argv: []string{"--bogus", "-x", "train.py"}, where: "--bogus", problem: "unrecognized arguments: --bogus -x"},
		{name: "unknown short after flag", argv: []string{"-m3", "train.py"}, where: "-3", problem: "unrecognized arguments: -3"},
		{name: "unknown takes no value: its value becomes the script", argv: []string{"--bogus", "3", "train.py"}, where: "--bogus", problem: "unrecognized"},
		{name: "flag with a value", argv: []string{"--standalone=1", "train.py"}, where: "--standalone", problem: "ignored explicit argument"},
		{name: "flag with an empty value", argv: []string{"--standalone=", "train.py"}, where: "--standalone", problem: "ignored explicit argument"},
		{name: "short flag with =", argv: []string{"-m=1", "train.py"}, where: "-m", problem: "ignored explicit argument"},
		{name: "long flag prefix with =", argv: []string{"--mod=1", "train.py"}, where: "--mod", problem: "ignored explicit argument"},
		{name: "help with a value", argv: []string{"--help=yes"}, where: "--help", problem: "ignored explicit argument"},
		{name: "gorun flag with a value", argv: []string{"--dry-run=true", "train.py"}, where: "--dry-run", problem: "ignored explicit argument"},
		{name: "PET_STANDALONE=true", argv: []string{"train.py"}, env: map[string]string{"PET_STANDALONE": "true"}, where: "PET_STANDALONE", problem: "not an integer"},
		{name: "PET_MODULE=yes even with -m", argv: []string{"-m", "pkg"}, env: map[string]string{"PET_MODULE": "yes"}, where: "PET_MODULE", problem: "not an integer"},
		{name: "include with exclude", argv: []string{"--include", "a", "--exclude", "b", "train.py"}, where: "--exclude", problem: "cannot be combined with --include"},
		{name: "env key invalid", argv: []string{"--env", "1A=x", "train.py"}, where: "--env (argument 1)", problem: `"1A" is not a valid variable name`},
		{name: "env without = nor a name", argv: []string{"--nnodes=1", "--env", "hf_abc.def", "train.py"}, where: "--env (argument 2)", problem: "not a variable name (it is not shown"},
		{name: "env empty key", argv: []string{"--env==x", "train.py"}, where: "--env (argument 1)", problem: "NAME=VALUE"},
		{name: "env as typed, by position", argv: []string{"--env", "A=1", "--en=1B", "train.py"}, where: "--en (argument 3)", problem: "expected NAME or NAME=VALUE"},
		{name: "ssh port zero", argv: []string{"--ssh-port", "0", "train.py"}, where: "--ssh-port", problem: "invalid port"},
		{name: "ssh port big", argv: []string{"--ssh-port=65536", "train.py"}, where: "--ssh-port", problem: "invalid port"},
		{name: "telemetry interval word", argv: []string{"--telemetry-interval", "often", "train.py"}, where: "--telemetry-interval", problem: "not a sampling period"},
		{name: "telemetry interval too short", argv: []string{"--telemetry-interval=10ms", "train.py"}, where: "--telemetry-interval", problem: "at least 100ms"},
		{name: "ssh port word", argv: []string{"--ssh-p", "ssh", "train.py"}, where: "--ssh-p", problem: "invalid port"},
		{name: "format", argv: []string{"--format", "yaml", "train.py"}, where: "--format", problem: `invalid choice: "yaml"`},
		{name: "preflight", argv: []string{"--preflight", "maybe", "train.py"}, where: "--preflight", problem: "invalid choice"},
		{name: "empty torchrun", argv: []string{"--torchrun=", "train.py"}, where: "--torchrun", problem: "empty value"},
		{name: "empty hosts", argv: []string{"--hosts", "", "train.py"}, where: "--hosts", problem: "empty value"},
	}
	cases = append(cases, endpointRefusals()...)
	cases = append(cases, torchrunVarRefusals()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseWith(tc.argv, envOf(tc.env), fixedID)
			if err == nil {
				t.Fatalf("ParseWith(%q) = %+v, want an error", tc.argv, got.Torchrun)
			}
			var ie *userr.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T) is not a *userr.InputError", err, err)
			}
			if ie.Where != tc.where {
				t.Errorf("Where = %q, want %q (%v)", ie.Where, tc.where, err)
			}
			if !strings.Contains(ie.Problem, tc.problem) {
				t.Errorf("Problem = %q, want it to contain %q", ie.Problem, tc.problem)
			}
			if ie.Fix == "" {
				t.Errorf("no Fix in %v", err)
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	cases := []struct {
		name string
		argv []string
		help bool
	}{
		{"-h", []string{"-h"}, true},
		{"--help", []string{"--help"}, true},
		{"--he prefix", []string{"--he"}, true},
		{"help wins over an unknown option", []string{"--bogus", "-h", "x"}, true},
		{"help wins over a missing script", []string{"--nnodes", "2", "-h"}, true},
		{"help wins over a bad value checked later", []string{"--nnodes", "0", "--help", "x"}, true},
		{"-mh", []string{"-mh"}, true},
		{"-hm", []string{"-hm", "x"}, true},
		{"-h after the script belongs to the script", []string{"train.py", "-h"}, false},
		{"-h after -- is the script", []string{"--", "-h"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.argv, nil)
			if got := errors.Is(err, ErrHelp); got != tc.help {
				t.Errorf("Parse(%q) error = %v, want help %v", tc.argv, err, tc.help)
			}
		})
	}
}

// torchrunOptions is torchrun 2.11's option list, copied from
// `torchrun --help` (reference/h200-1gpu/torchrun_help.txt), grouped by
// option: canonical name first.
var torchrunOptions = [][]string{
	{"--help", "-h"},
	{"--nnodes"},
	{"--nproc-per-node", "--nproc_per_node"},
	{"--rdzv-backend", "--rdzv_backend"},
	{"--rdzv-endpoint", "--rdzv_endpoint"},
	{"--rdzv-id", "--rdzv_id"},
	{"--rdzv-conf", "--rdzv_conf"},
	{"--standalone"},
	{"--max-restarts", "--max_restarts"},
	{"--monitor-interval", "--monitor_interval"},
	{"--start-method", "--start_method"},
	{"--event-log-handler", "--event_log_handler"},
	{"--role"},
	{"--module", "-m"},
	{"--no-python", "--no_python"},
	{"--run-path", "--run_path"},
	{"--log-dir", "--log_dir"},
	{"--redirects", "-r"},
	{"--tee", "-t"},
	{"--local-ranks-filter", "--local_ranks_filter"},
	{"--duplicate-stdout-filters", "--duplicate_stdout_filters"},
	{"--duplicate-stderr-filters", "--duplicate_stderr_filters"},
	{"--node-rank", "--node_rank"},
	{"--master-addr", "--master_addr"},
	{"--master-port", "--master_port"},
	{"--local-addr", "--local_addr"},
	{"--logs-specs", "--logs_specs"},
	{"--numa-binding", "--numa_binding"},
	{"--signals-to-handle", "--signals_to_handle"},
	{"--virtual-local-rank", "--virtual_local_rank"},
}

var gorunOptions = []string{
	"--hosts", "--hostfile", "--include", "--exclude", "--env", "--torchrun", "--dry-run", "--format",
	"--preflight", "--launcher", "--preflight-bandwidth", "--ssh-config", "--ssh-user", "--ssh-port", "--ssh-identity", "--known-hosts",
	"--ssh-accept-new", "--ssh-command", "--remote-gorun", "--hang-timeout", "--hang-timeout-floor", "--flight-recorder", "--telemetry", "--telemetry-interval", "--report", "--summary", "--warm-restart", "--stop-grace", "--shutdown-timeout",
	"--prewarm", "--fanout", "--timestamps", "--worker-timestamps", "--step-pattern", "--checkpoint-pattern",
}

func TestOptionNames(t *testing.T) {
	var want []string
	for _, o := range torchrunOptions[1:] {
		want = append(want, o[0])
	}
	if got := TorchrunOptionNames(); !reflect.DeepEqual(got, want) {
		t.Errorf("TorchrunOptionNames() = %q\nwant %q", got, want)
	}
	if got := GorunOptionNames(); !reflect.DeepEqual(got, gorunOptions) {
		t.Errorf("GorunOptionNames() = %q\nwant %q", got, gorunOptions)
	}
}

// Every full name, torchrun's or gorun's, must resolve to its own option: no
// gorun name may be a prefix of a torchrun spelling or the other way round.
func TestGorunNamesDoNotShadowTorchrun(t *testing.T) {
	p := newParser(nil)
	for _, g := range gorunOptions {
		for _, o := range torchrunOptions {
			for _, n := range o {
				if strings.HasPrefix(n, g) || strings.HasPrefix(g, n) {
					t.Errorf("gorun option %s and torchrun option %s are prefixes of each other", g, n)
				}
			}
		}
		if m, kind := p.classify(g); kind != tokOption || m.spec.gorun == nil || m.spec.canonical() != g {
			t.Errorf("%s does not resolve to itself", g)
		}
	}
	for _, o := range torchrunOptions {
		for _, n := range o {
			m, kind := p.classify(n)
			if kind != tokOption || m.spec.gorun != nil || m.spec.canonical() != o[0] {
				t.Errorf("%s does not resolve to %s", n, o[0])
			}
		}
	}
}

// Adding gorun's options changes only these torchrun prefixes from one
// option to ambiguous; a new gorun option that breaks more fails here.
func TestPrefixesThatChangeMeaning(t *testing.T) {
	want := []string{"--h", "--re", "--t", "--te"}
	p := newParser(nil)
	var got []string
	seen := map[string]bool{}
	for _, o := range torchrunOptions {
		for _, n := range o {
			if !strings.HasPrefix(n, "--") {
				continue
			}
			for l := 3; l < len(n); l++ {
				prefix := n[:l]
				if seen[prefix] {
					continue
				}
				seen[prefix] = true
				owners := map[string]bool{}
				for _, o2 := range torchrunOptions {
					for _, n2 := range o2 {
						if strings.HasPrefix(n2, prefix) {
							owners[n2] = true // argparse counts option strings, not options
						}
					}
				}
				if len(owners) != 1 {
					continue
				}
				if _, kind := p.classify(prefix); kind != tokOption {
					got = append(got, prefix)
				}
			}
		}
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("torchrun prefixes made ambiguous by gorun options = %q, want %q", got, want)
	}
}

// Every spelling of every torchrun option, in the space and = forms, lands in
// Given under the canonical name and changes the configuration.
func TestEverySpelling(t *testing.T) {
	type option struct {
		value string // "" for a flag
		check func(c Config) bool
	}
	options := map[string]option{
		"--nnodes":                   {"2", func(c Config) bool { return c.NNodesMax == 2 }},
		"--nproc-per-node":           {"3", func(c Config) bool { return c.NProcPerNode == "3" }},
		"--rdzv-backend":             {"etcd", func(c Config) bool { return c.RdzvBackend == "etcd" }},
		"--rdzv-endpoint":            {"h:1", func(c Config) bool { return c.RdzvEndpoint == "h:1" }},
		"--rdzv-id":                  {"j7", func(c Config) bool { return c.RdzvID == "j7" }},
		"--rdzv-conf":                {"k=v", func(c Config) bool { return c.RdzvConfigs["k"] == "v" }},
		"--standalone":               {"", func(c Config) bool { return c.Standalone }},
		"--max-restarts":             {"4", func(c Config) bool { return c.MaxRestarts == 4 }},
		"--monitor-interval":         {"0.5", func(c Config) bool { return c.MonitorInterval == 0.5 }},
		"--start-method":             {"fork", func(c Config) bool { return c.StartMethod == "fork" }},
		"--event-log-handler":        {"console", func(c Config) bool { return c.EventLogHandler == "console" }},
		"--role":                     {"r", func(c Config) bool { return c.Role == "r" }},
		"--module":                   {"", func(c Config) bool { return c.Module }},
		"--no-python":                {"", func(c Config) bool { return c.NoPython }},
		"--run-path":                 {"", func(c Config) bool { return c.RunPath }},
		"--log-dir":                  {"/l", func(c Config) bool { return c.LogDir == "/l" }},
		"--redirects":                {"3", func(c Config) bool { return c.Redirects == "3" }},
		"--tee":                      {"2", func(c Config) bool { return c.Tee == "2" }},
		"--local-ranks-filter":       {"0,1", func(c Config) bool { return c.LocalRanksFilter == "0,1" }},
		"--duplicate-stdout-filters": {"a", func(c Config) bool { return c.DuplicateStdoutFilters == "a" }},
		"--duplicate-stderr-filters": {"b", func(c Config) bool { return c.DuplicateStderrFilters == "b" }},
		"--node-rank":                {"1", func(c Config) bool { return c.NodeRank == 1 }},
		"--master-addr":              {"m", func(c Config) bool { return c.MasterAddr == "m" }},
		"--master-port":              {"1", func(c Config) bool { return c.MasterPort == 1 }},
		"--local-addr":               {"l", func(c Config) bool { return c.LocalAddr == "l" }},
		"--logs-specs":               {"s", func(c Config) bool { return c.LogsSpecs == "s" }},
		"--numa-binding":             {"socket", func(c Config) bool { return c.NumaBinding == "socket" }},
		"--signals-to-handle":        {"SIGUSR1", func(c Config) bool { return c.SignalsToHandle == "SIGUSR1" }},
		"--virtual-local-rank":       {"", func(c Config) bool { return c.VirtualLocalRank }},
	}
	for _, o := range torchrunOptions[1:] {
		canonical := o[0]
		opt, ok := options[canonical]
		if !ok {
			t.Errorf("no test value for %s", canonical)
			continue
		}
		for _, spelling := range o {
			forms := [][]string{{spelling}}
			if opt.value != "" {
				forms = [][]string{{spelling, opt.value}, {spelling + "=" + opt.value}}
			}
			for _, form := range forms {
				argv := append(append([]string{}, form...), "train.py")
				t.Run(strings.Join(form, " "), func(t *testing.T) {
					cl, err := ParseWith(argv, nil, fixedID)
					if err != nil {
						t.Fatal(err)
					}
					want := []Arg{{Name: canonical, Dest: strings.ReplaceAll(canonical[2:], "-", "_"), Value: opt.value, IsFlag: opt.value == ""}}
					if !reflect.DeepEqual(cl.Given, want) {
						t.Errorf("Given = %+v, want %+v", cl.Given, want)
					}
					if !opt.check(cl.Torchrun) {
						t.Errorf("%q did not set %s: %+v", argv, canonical, cl.Torchrun)
					}
					if !cl.Set(want[0].Dest) {
						t.Errorf("Set(%q) = false", want[0].Dest)
					}
				})
			}
		}
		// Every option but --logs-specs and --numa-binding has a PET_ default.
		env := "PET_" + strings.ToUpper(strings.ReplaceAll(canonical[2:], "-", "_"))
		value := opt.value
		if value == "" {
			value = "1"
		}
		t.Run(env, func(t *testing.T) {
			cl, err := ParseWith([]string{"train.py"}, envOf(map[string]string{env: value}), fixedID)
			if err != nil {
				t.Fatal(err)
			}
			noEnv := canonical == "--logs-specs" || canonical == "--numa-binding"
			if got := opt.check(cl.Torchrun); got == noEnv {
				t.Errorf("%s=%s applied: %v, want %v", env, value, got, !noEnv)
			}
			if !noEnv && (len(cl.Given) != 1 || !cl.Given[0].FromEnv || cl.Given[0].Name != canonical) {
				t.Errorf("Given = %+v", cl.Given)
			}
		})
	}
}

func TestParseStandaloneID(t *testing.T) {
	uuid4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	argv := []string{"--standalone", "train.py"}
	a, err := Parse(argv, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(argv, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.Torchrun.RdzvID, b.Torchrun.RdzvID} {
		if !uuid4.MatchString(id) {
			t.Errorf("rendezvous id %q is not a uuid4", id)
		}
	}
	if a.Torchrun.RdzvID == b.Torchrun.RdzvID {
		t.Errorf("two standalone runs share the id %s", a.Torchrun.RdzvID)
	}
	c, err := ParseWith(argv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Torchrun.RdzvID != placeholderRdzvID || !uuid4.MatchString(placeholderRdzvID) {
		t.Errorf("placeholder id = %q", c.Torchrun.RdzvID)
	}
	if d, _ := Parse([]string{"train.py"}, nil); d.Torchrun.RdzvID != "none" {
		t.Errorf("non-standalone id = %q, want none", d.Torchrun.RdzvID)
	}
}

// The parser must not keep or share state between calls: the result's
// slices are the caller's.
func TestParseDoesNotAlias(t *testing.T) {
	argv := []string{"--env", "A=1", "train.py", "x"}
	cl, err := Parse(argv, nil)
	if err != nil {
		t.Fatal(err)
	}
	argv[3] = "changed"
	if cl.Torchrun.TrainingScriptArgs[0] != "x" {
		t.Errorf("script args alias argv: %q", cl.Torchrun.TrainingScriptArgs)
	}
}

func TestPythonNumbers(t *testing.T) {
	ints := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"7", 7, true}, {" 7\n", 7, true}, {"+7", 7, true}, {"-7", -7, true}, {"007", 7, true},
		{"1_000", 1000, true}, {"1__0", 0, false}, {"_1", 0, false}, {"1_", 0, false},
		{"", 0, false}, {"0x10", 0, false}, {"1.0", 0, false}, {"9223372036854775808", 0, false},
	}
	for _, tc := range ints {
		if got, ok := pyInt(tc.in); ok != tc.ok || got != tc.want {
			t.Errorf("pyInt(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	floats := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0.5", 0.5, true}, {".5", 0.5, true}, {"5.", 5, true}, {"1e-1", 0.1, true}, {" 2 ", 2, true},
		{"1_0.2_5", 10.25, true}, {"-1", -1, true}, {"0x1p-2", 0, false}, {"1_", 0, false},
		{"", 0, false}, {".", 0, false}, {"e1", 0, false}, {"1e", 0, false},
	}
	for _, tc := range floats {
		if got, ok := pyFloat(tc.in); ok != tc.ok || got != tc.want {
			t.Errorf("pyFloat(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	for _, in := range []string{"inf", "-Infinity", "NaN"} {
		if _, ok := pyFloat(in); !ok {
			t.Errorf("pyFloat(%q) refused; Python accepts it", in)
		}
	}
}

func FuzzParse(f *testing.F) {
	seeds := [][2]string{
		{"train.py", ""},
		{"--nproc-per-node=8\x00train.py\x00--lr\x003e-4", ""},
		{"--nnodes\x001:2\x00--rdzv-backend=c10d\x00x", "PET_MASTER_PORT=1"},
		{"-mr3\x00--standalone\x00pkg", "PET_STANDALONE=1"},
		{"--hosts\x00a:8\x00--env\x00A=1\x00--\x00-x", ""},
		{"--rdzv-conf\x00a=1,b=2\x00--tee\x000:1,1:2\x00t", "PET_NNODES=2:3"},
		{"--nproc\x00-1\x00x", "PET_NO_PYTHON=1"},
		{"-r=\x00--=x", ""},
		{"--rdzv-endpoint\x00[::1]:29500\x00--master-port\x001\x00t", ""},
		{"--rdzv-backend=c10d\x00--rdzv-endpoint=localhost:0\x00t", ""},
		{"--env\x00MASTER_ADDR=x\x00--x\x1b\x00t", "PET_MASTER_ADDR=h"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, args, environ string) {
		var argv []string
		if args != "" {
			argv = strings.Split(args, "\x00")
		}
		env := map[string]string{}
		for _, kv := range strings.Split(environ, "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		cl, err := ParseWith(argv, envOf(env), fixedID)
		if err != nil {
			var ie *userr.InputError
			if !errors.Is(err, ErrHelp) && (!errors.As(err, &ie) || ie.Where == "" || ie.Problem == "") {
				t.Fatalf("%q: error %v (%T) is neither ErrHelp nor a complete *userr.InputError", argv, err, err)
			}
			msg := err.Error()
			if strings.ContainsFunc(msg, userr.UnsafeRune) || !utf8.ValidString(msg) {
				t.Fatalf("%q: message %q holds a control character or invalid UTF-8", argv, msg)
			}
			// Each echo is cut to userr.MaxEcho runes; the longest fixed text
			// is the list of every option an ambiguous "--" matches.
			if len(msg) > 4096 {
				t.Fatalf("%q: message of %d bytes", argv, len(msg))
			}
			return
		}
		c := cl.Torchrun
		if c.MasterPort < 1 || c.MasterPort > 65535 {
			t.Errorf("%q: master port %d", argv, c.MasterPort)
		}
		for _, kv := range cl.Gorun.Env {
			if key, _, _ := strings.Cut(kv, "="); !envKey().MatchString(key) {
				t.Errorf("%q: --env %q accepted", argv, key)
			} else if _, set := torchrunWorkerVar(key); set {
				t.Errorf("%q: --env %s accepted, which torchrun sets", argv, key)
			}
		}
		if c.NNodesMin < 1 || c.NNodesMin > c.NNodesMax {
			t.Errorf("%q: nnodes %d:%d", argv, c.NNodesMin, c.NNodesMax)
		}
		if c.TrainingScript == "" || c.TrainingScriptArgs == nil || c.RdzvConfigs == nil || cl.Given == nil {
			t.Errorf("%q: script %q args %v configs %v given %v", argv, c.TrainingScript, c.TrainingScriptArgs, c.RdzvConfigs, cl.Given)
		}
		if c.NoPython && c.Module && !c.RunPath {
			t.Errorf("%q: --no-python with --module accepted", argv)
		}
		if c.RdzvBackend == "static" && (c.RdzvEndpoint == "" || c.RdzvConfigs["rank"] == "") {
			t.Errorf("%q: static rendezvous without endpoint or rank: %+v", argv, c)
		}
		for _, a := range cl.Given {
			if !strings.HasPrefix(a.Name, "--") || strings.Contains(a.Name, "_") {
				t.Errorf("%q: Given name %q is not canonical", argv, a.Name)
			}
		}
		if cl.Gorun.Include != "" && cl.Gorun.Exclude != "" {
			t.Errorf("%q: include and exclude both accepted", argv)
		}
	})
}

// endpointRefusals are --rdzv-endpoint values torchrun would only trip on
// once it runs, or could misread.
func endpointRefusals() []errCase {
	ep := func(name, value, problem string, more ...string) errCase {
		argv := append(append([]string{}, more...), "--rdzv-endpoint", value, "train.py")
		return errCase{name: "endpoint " + name, argv: argv, where: "--rdzv-endpoint", problem: problem}
	}
	return []errCase{
		ep("port not a number", "host:abc", "not a number from 0 to 65535"),
		ep("port too large", "host:99999", "not a number from 0 to 65535"),
		ep("port 65536", "host:65536", "not a number from 0 to 65535"),
		ep("port negative", "host:-5", "not a number from 0 to 65535"),
		ep("port with a sign", "host:+5", "not a number from 0 to 65535"),
		ep("port empty", "host:", "not a number from 0 to 65535"),
		ep("port six digits", "host:000080", "not a number from 0 to 65535"),
		ep("unclosed bracket", "[::1", "unclosed '['"),
		ep("unclosed bracket with port", "[::1:29500", "unclosed '['"),
		ep("bare IPv6 with port", "::1:29500", "more than one ':'"),
		ep("bare IPv6", "fe80::1", "more than one ':'"),
		ep("empty", "", "endpoint is empty"),
		ep("blank", "  ", "endpoint is empty"),
		ep("empty host", ":29500", "no host before ':'"),
		ep("IPv4 in brackets", "[10.0.0.1]:29500", "not an IPv6 address"),
		ep("name in brackets", "[node1]:29500", "not an IPv6 address"),
		ep("junk after bracket", "[::1]x", `unexpected "x" after ']'`),
		ep("bad host name", "a..b:29500", "empty label"),
		ep("host with a space", "a b:29500", "invalid character ' '"),
		ep("host with a user", "me@node1:29500", "user part"),
		ep("static without a port", "node1", "static rendezvous needs one"),
		ep("static with port 0", "10.0.0.1:0", "port 0"),
		ep("c10d port 0 on several nodes", "node1:0", "port 0", "--rdzv-backend=c10d", "--nnodes=2"),
		ep("c10d port 0 on a node range", "node1:0", "port 0", "--rdzv-backend=c10d", "--nnodes=1:2"),
		ep("etcd port 0", "node1:0", "port 0", "--rdzv-backend=etcd"),
		ep("underscore spelling", "host:x", "not a number", "--rdzv_backend=c10d"),
		{name: "endpoint = form as typed", argv: []string{"--rdzv_endpoint=host:-5", "train.py"}, where: "--rdzv_endpoint", problem: "not a number from 0 to 65535"},
		{name: "endpoint from PET_", argv: []string{"train.py"}, env: map[string]string{"PET_RDZV_ENDPOINT": "h:abc"}, where: "PET_RDZV_ENDPOINT", problem: "not a number"},
	}
}

// torchrunVarRefusals: --env for a variable torchrun sets for every worker
// would be shown as the user's value although torchrun overrides it.
func torchrunVarRefusals() []errCase {
	var cases []errCase
	for _, name := range []string{
		"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
		"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
		"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
		"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE",
	} {
		cases = append(cases, errCase{
			name:    "env " + name,
			argv:    []string{"--env", name + "=1", "train.py"},
			where:   "--env (argument 1)",
			problem: "torchrun sets " + name + " for every worker itself",
		})
	}
	return cases
}

// The fix of a refused torchrun variable names the option that sets it.
func TestTorchrunVarFix(t *testing.T) {
	tests := []struct{ name, fix string }{
		{"MASTER_ADDR", "--master-addr"},
		{"MASTER_PORT", "--master-port"},
		{"RANK", "--nproc-per-node"},
		{"LOCAL_RANK", "--nproc-per-node"},
		{"ROLE_NAME", "--role"},
		{"TORCHELASTIC_MAX_RESTARTS", "--max-restarts"},
		{"TORCHELASTIC_RUN_ID", "--rdzv-id"},
		{"TORCHELASTIC_SIGNALS_TO_HANDLE", "--signals-to-handle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWith([]string{"--env", tt.name + "=x", "train.py"}, nil, fixedID)
			var ie *userr.InputError
			if !errors.As(err, &ie) || !strings.Contains(ie.Fix, tt.fix) {
				t.Errorf("error %v: want a fix naming %s", err, tt.fix)
			}
		})
	}
}

// Variables torchrun only defaults or reads stay the user's to set.
func TestEnvAcceptsVariablesTorchrunReads(t *testing.T) {
	for _, kv := range []string{
		"TORCH_NCCL_ASYNC_ERROR_HANDLING=0", "OMP_NUM_THREADS=4", "TORCHELASTIC_ENABLE_FILE_TIMER=1",
		"TORCHELASTIC_TIMER_FILE=/tmp/t", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${rank}]",
		"rank=lowercase is not torchrun's", "MASTER_ADDRESS=x", "CUDA_VISIBLE_DEVICES=0,1",
	} {
		t.Run(kv, func(t *testing.T) {
			cl, err := ParseWith([]string{"--env", kv, "train.py"}, nil, fixedID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cl.Gorun.Env, []string{kv}) {
				t.Errorf("Env = %q", cl.Gorun.Env)
			}
		})
	}
}

func TestRdzvEndpointAccepts(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		want string
	}{
		{"static host:port", []string{"--rdzv-endpoint", "host:29500"}, "host:29500"},
		{"static IPv6 in brackets", []string{"--rdzv-endpoint", "[::1]:29500"}, "[::1]:29500"},
		{"static IPv4", []string{"--rdzv_endpoint=10.0.0.1:1"}, "10.0.0.1:1"},
		{"static port 65535", []string{"--rdzv-endpoint=h:65535"}, "h:65535"},
		{"static port with a leading zero, as torchrun reads it", []string{"--rdzv-endpoint=h:08"}, "h:08"},
		{"surrounding spaces, stripped by torchrun", []string{"--rdzv-endpoint", " h:1 "}, " h:1 "},
		{"c10d host without a port", []string{"--rdzv-backend=c10d", "--rdzv-endpoint", "host"}, "host"},
		{"c10d IPv6 without a port", []string{"--rdzv-backend=c10d", "--rdzv-endpoint", "[fe80::1%eth0]"}, "[fe80::1%eth0]"},
		{"c10d single node port 0", []string{"--rdzv-backend=c10d", "--rdzv-endpoint", "localhost:0"}, "localhost:0"},
		{"etcd host", []string{"--rdzv-backend=etcd-v2", "--rdzv-endpoint", "etcd1:2379"}, "etcd1:2379"},
		{"underscore in a host name", []string{"--rdzv-backend=c10d", "--rdzv-endpoint", "gpu_01:29400"}, "gpu_01:29400"},
		{"a plugin backend's endpoint is not checked", []string{"--rdzv-backend=mine", "--rdzv-endpoint", "mine://a,b"}, "mine://a,b"},
		{"standalone replaces a bad endpoint", []string{"--standalone", "--rdzv-endpoint", "h:x"}, "localhost:0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl, err := ParseWith(append(tt.argv, "train.py"), nil, fixedID)
			if err != nil {
				t.Fatal(err)
			}
			if cl.Torchrun.RdzvEndpoint != tt.want {
				t.Errorf("RdzvEndpoint = %q, want %q", cl.Torchrun.RdzvEndpoint, tt.want)
			}
		})
	}
}

func TestMasterPortAccepts(t *testing.T) {
	for _, tt := range []struct {
		name, value string
		want        int
	}{{"1", "1", 1}, {"65535", "65535", 65535}, {"as Python writes it", " 2_9500 ", 29500}} {
		t.Run(tt.name, func(t *testing.T) {
			cl, err := ParseWith([]string{"--master-port", tt.value, "train.py"}, nil, fixedID)
			if err != nil {
				t.Fatal(err)
			}
			if cl.Torchrun.MasterPort != tt.want {
				t.Errorf("MasterPort = %d, want %d", cl.Torchrun.MasterPort, tt.want)
			}
		})
	}
}

// No error shows an --env value, which may be a secret; a mistyped --env
// (an unknown option) shows nothing after its '=' either.
func TestErrorsDoNotEchoEnvValues(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	tests := []struct {
		name string
		argv []string
	}{
		{"no equals sign", []string{"--env", secret, "train.py"}},
		{"bad key", []string{"--env", "1BAD=" + secret, "train.py"}},
		{"torchrun's variable", []string{"--env", "MASTER_ADDR=" + secret, "train.py"}},
		{"bad key in = form", []string{"--env=-X=" + secret, "train.py"}},
		{"mistyped --env", []string{"--evn=WANDB_API_KEY=" + secret, "train.py"}},
		{"mistyped --env, with a later error", []string{"--evn=K=" + secret, "--nnodes=x", "train.py"}},
		{"unknown short option", []string{"-e=K=" + secret, "train.py"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWith(tt.argv, nil, fixedID)
			if err == nil {
				t.Fatal("no error")
			}
			var ie *userr.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not a *userr.InputError", err)
			}
			for _, s := range []string{err.Error(), ie.Where, ie.Problem, ie.Fix} {
				if strings.Contains(s, secret[2:]) {
					t.Errorf("error shows the value: %s", s)
				}
			}
		})
	}
}

// A huge option is shown once, cut, with its length.
func TestUnknownOptionIsCut(t *testing.T) {
	long := "--" + strings.Repeat("x", 100_000)
	_, err := ParseWith([]string{long, long, long, "-a", "-b", "-c", "-d", "train.py"}, nil, fixedID)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if len(msg) > 2000 {
		t.Errorf("message is %d bytes", len(msg))
	}
	for _, want := range []string{"…(100002 bytes)", "and 2 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// Control characters in what the user typed never reach the terminal raw.
func TestParseErrorsEscapeControls(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		want string
	}{
		{"unknown option with ESC", []string{"--x\x1b[2J", "train.py"}, `--x\x1b[2J`},
		{"unknown option with CR", []string{"--ok\rERASED", "train.py"}, `--ok\x0dERASED`},
		{"unknown option with C1", []string{"--a\u009bb", "train.py"}, `--a\u009bb`},
		{"unknown option with a bidi override", []string{"--a\u202eb", "train.py"}, `--a\u202eb`},
		{"unknown option, not UTF-8", []string{"--a\xc3", "train.py"}, `--a\xc3`},
		{"unknown option in UTF-8 letters", []string{"--grüße", "train.py"}, `--grüße`},
		{"bad value", []string{"--nnodes", "\x1b]0;pwned\x07", "train.py"}, `"\x1b]0;pwned\a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWith(tt.argv, nil, fixedID)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("message %q lacks %q", msg, tt.want)
			}
			if strings.ContainsFunc(msg, userr.UnsafeRune) || !utf8.ValidString(msg) {
				t.Errorf("message %q holds a control character or invalid UTF-8", msg)
			}
		})
	}
}

func TestPreflightBandwidthOption(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    string
		wantErr string
	}{
		{[]string{"train.py"}, "", ""},
		{[]string{"--preflight-bandwidth", "node", "train.py"}, "node", ""},
		{[]string{"--preflight-bandwidth=all", "--preflight", "warn", "train.py"}, "all", ""},
		{[]string{"--preflight-band", "off", "train.py"}, "off", ""},
		{[]string{"--preflight-bandwidth", "fast", "train.py"}, "", "fast"},
	} {
		cl, err := Parse(tc.argv, func(string) string { return "" })
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want one naming %q", tc.argv, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.argv, err)
			continue
		}
		if cl.Gorun.PreflightBandwidth != tc.want {
			t.Errorf("%q: PreflightBandwidth %q, want %q", tc.argv, cl.Gorun.PreflightBandwidth, tc.want)
		}
	}
}

// Each row of gorun's table sets its own field of Options and no other,
// and the defaults the rows give are Options' documented ones.
func TestEveryGorunOption(t *testing.T) {
	if got := gorunDefaults(optionTable()); !reflect.DeepEqual(got, defaultOptions()) {
		t.Errorf("defaults = %+v, want %+v", got, defaultOptions())
	}
	samples := map[string]struct{ value, field string }{
		"--hosts":               {"a:1", "Hosts"},
		"--hostfile":            {"hf", "Hostfile"},
		"--include":             {"a", "Include"},
		"--exclude":             {"a", "Exclude"},
		"--env":                 {"A=1", "Env"},
		"--torchrun":            {"python -m torch.distributed.run", "Torchrun"},
		"--dry-run":             {"", "DryRun"},
		"--format":              {"json", "Format"},
		"--preflight":           {"warn", "Preflight"},
		"--launcher":            {"ssh", "Launcher"},
		"--preflight-bandwidth": {"node", "PreflightBandwidth"},
		"--ssh-config":          {"cfg", "SSHConfig"},
		"--ssh-user":            {"me", "SSHUser"},
		"--ssh-port":            {"2222", "SSHPort"},
		"--ssh-identity":        {"id", "SSHIdentity"},
		"--known-hosts":         {"kh", "KnownHosts"},
		"--ssh-accept-new":      {"", "SSHAcceptNew"},
		"--ssh-command":         {"ssh -4", "SSHCommand"},
		"--remote-gorun":        {"/opt/gorun", "RemoteGorun"},
		"--hang-timeout":        {"90", "HangTimeout"},
		"--hang-timeout-floor":  {"2m", "HangTimeoutFloor"},
		"--flight-recorder":     {"fr", "FlightRecorder"},
		"--telemetry":           {"t.jsonl", "Telemetry"},
		"--telemetry-interval":  {"2s", "TelemetryInterval"},
		"--report":              {"r.html", "Report"},
		"--summary":             {"s.json", "Summary"},
		"--warm-restart":        {"off", "WarmRestart"},
		"--stop-grace":          {"2m", "StopGrace"},
		"--shutdown-timeout":    {"45", "ShutdownTimeout StopGrace"},
		"--prewarm":             {"torch,numpy", "Prewarm PrewarmAuto"},
		"--fanout":              {"64", "Fanout"},
		"--timestamps":          {"", "Timestamps"},
		"--worker-timestamps":   {"", "WorkerTimestamps"},
		"--step-pattern":        {"batch (?P<step>\\d+)", "StepPattern"},
		"--checkpoint-pattern":  {"ckpt saved", "CheckpointPattern"},
	}
	for _, name := range GorunOptionNames() {
		t.Run(name, func(t *testing.T) {
			sample, ok := samples[name]
			if !ok {
				t.Fatalf("no sample value for %s", name)
			}
			argv := []string{name}
			if sample.value != "" {
				argv = append(argv, sample.value)
			}
			want := defaultOptions()
			if name == "--format" {
				argv, want.DryRun = append(argv, "--dry-run"), true
			}
			cl, err := Parse(append(argv, "train.py"), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, def := reflect.ValueOf(cl.Gorun), reflect.ValueOf(want)
			for i := range got.NumField() {
				changed := !reflect.DeepEqual(got.Field(i).Interface(), def.Field(i).Interface())
				if field := got.Type().Field(i).Name; changed != slices.Contains(strings.Fields(sample.field), field) {
					t.Errorf("%s: field %s changed: %v", name, field, changed)
				}
			}
		})
	}
}

// TestShutdownTimeout: torchrun's --shutdown-timeout (seconds) and
// TORCH_ELASTIC_SHUTDOWN_TIMEOUT set the stop grace; --stop-grace wins
// over both, the flag over the variable; a bad value is refused with
// where it came from.
func TestShutdownTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want time.Duration
		bad  string // where the error says the bad value is
	}{
		{"default", nil, "", DefaultStopGrace, ""},
		{"--shutdown-timeout", []string{"--shutdown-timeout", "45"}, "", 45 * time.Second, ""},
		{"underscore spelling", []string{"--shutdown_timeout=45"}, "", 45 * time.Second, ""},
		{"the variable", nil, "50", 50 * time.Second, ""},
		{"the flag over the variable", []string{"--shutdown-timeout", "45"}, "50", 45 * time.Second, ""},
		{"--stop-grace over both", []string{"--shutdown-timeout", "45", "--stop-grace", "2s"}, "50", 2 * time.Second, ""},
		{"--stop-grace over the variable", []string{"--stop-grace", "2s"}, "50", 2 * time.Second, ""},
		{"bad flag", []string{"--shutdown-timeout", "soon"}, "", 0, "--shutdown-timeout"},
		{"bad variable", nil, "-3", 0, ShutdownTimeoutVar},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := Parse(append(tc.args, "train.py"), func(k string) string {
				if k == ShutdownTimeoutVar {
					return tc.env
				}
				return ""
			})
			if tc.bad != "" {
				var ie *userr.InputError
				if !errors.As(err, &ie) || ie.Where != tc.bad {
					t.Fatalf("err %v, want an input error at %s", err, tc.bad)
				}
				return
			}
			if err != nil || cl.Gorun.StopGrace != tc.want {
				t.Fatalf("StopGrace %v, %v; want %v", cl.Gorun.StopGrace, err, tc.want)
			}
		})
	}
}
