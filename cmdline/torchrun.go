package cmdline

import (
	"crypto/rand"
	"fmt"
	"math"
	"strconv"

	"github.com/gorun/gorun/internal/userr"
)

// defaultRdzvTimeout is the rendezvous timeout in seconds torchrun's
// LaunchConfig puts in rdzv_configs when --rdzv-conf gives none.
const defaultRdzvTimeout = "900"

// optionTable declares every option of the launch command line: torchrun's,
// then gorun's. It is a function, not a variable, so nothing at package
// level can be mutated.
func optionTable() []*optionSpec {
	return append(torchrunTable(), gorunTable()...)
}

// torchrunTable declares torchrun 2.11's options in its own order
// (torch/distributed/run.py get_args_parser).
func torchrunTable() []*optionSpec {
	v := func(dest string, names ...string) *optionSpec {
		return &optionSpec{names: names, dest: dest, kind: kindValue, env: true}
	}
	f := func(dest string, names ...string) *optionSpec {
		return &optionSpec{names: names, dest: dest, kind: kindFlag, env: true}
	}
	typed := func(s *optionSpec, t valueType) *optionSpec { s.typ = t; return s }
	choice := func(s *optionSpec, c ...string) *optionSpec { s.choices = c; return s }
	noEnv := func(s *optionSpec) *optionSpec { s.env = false; return s }
	return []*optionSpec{
		{names: []string{"--help", "-h"}, dest: "help", kind: kindHelp},
		v("nnodes", "--nnodes"),
		v("nproc_per_node", "--nproc-per-node", "--nproc_per_node"),
		v("rdzv_backend", "--rdzv-backend", "--rdzv_backend"),
		v("rdzv_endpoint", "--rdzv-endpoint", "--rdzv_endpoint"),
		v("rdzv_id", "--rdzv-id", "--rdzv_id"),
		v("rdzv_conf", "--rdzv-conf", "--rdzv_conf"),
		f("standalone", "--standalone"),
		typed(v("max_restarts", "--max-restarts", "--max_restarts"), typeInt),
		typed(v("monitor_interval", "--monitor-interval", "--monitor_interval"), typeFloat),
		choice(v("start_method", "--start-method", "--start_method"), "spawn", "fork", "forkserver"),
		v("event_log_handler", "--event-log-handler", "--event_log_handler"),
		v("role", "--role"),
		f("module", "--module", "-m"),
		f("no_python", "--no-python", "--no_python"),
		f("run_path", "--run-path", "--run_path"),
		v("log_dir", "--log-dir", "--log_dir"),
		v("redirects", "--redirects", "-r"),
		v("tee", "--tee", "-t"),
		v("local_ranks_filter", "--local-ranks-filter", "--local_ranks_filter"),
		v("duplicate_stdout_filters", "--duplicate-stdout-filters", "--duplicate_stdout_filters"),
		v("duplicate_stderr_filters", "--duplicate-stderr-filters", "--duplicate_stderr_filters"),
		typed(v("node_rank", "--node-rank", "--node_rank"), typeInt),
		v("master_addr", "--master-addr", "--master_addr"),
		typed(v("master_port", "--master-port", "--master_port"), typeInt),
		v("local_addr", "--local-addr", "--local_addr"),
		noEnv(v("logs_specs", "--logs-specs", "--logs_specs")),
		noEnv(choice(v("numa_binding", "--numa-binding", "--numa_binding"), "node", "socket", "exclusive", "core-complex")),
		v("signals_to_handle", "--signals-to-handle", "--signals_to_handle"),
		f("virtual_local_rank", "--virtual-local-rank", "--virtual_local_rank"),
	}
}

// setting is the effective value of one torchrun option and where it came
// from, so a later check can name the spelling the user typed.
type setting struct {
	value string
	where string // "--nnod", "-r", "PET_NNODES"
}

// config derives the effective configuration as torchrun's run() and
// config_from_args do.
func (p *parser) config(newID func() string) (Config, error) {
	c := Config{
		RdzvBackend:            p.get("rdzv_backend", "static").value,
		RdzvEndpoint:           p.get("rdzv_endpoint", "").value,
		RdzvID:                 p.get("rdzv_id", "none").value,
		Standalone:             p.flag("standalone"),
		StartMethod:            p.get("start_method", "spawn").value,
		EventLogHandler:        p.get("event_log_handler", "null").value,
		Role:                   p.get("role", "default").value,
		Module:                 p.flag("module"),
		NoPython:               p.flag("no_python"),
		RunPath:                p.flag("run_path"),
		LogDir:                 p.get("log_dir", "").value,
		Redirects:              p.get("redirects", "0").value,
		Tee:                    p.get("tee", "0").value,
		LocalRanksFilter:       p.get("local_ranks_filter", "").value,
		DuplicateStdoutFilters: p.get("duplicate_stdout_filters", "").value,
		DuplicateStderrFilters: p.get("duplicate_stderr_filters", "").value,
		MasterAddr:             p.get("master_addr", "127.0.0.1").value,
		LocalAddr:              p.get("local_addr", "").value,
		LogsSpecs:              p.get("logs_specs", "").value,
		NumaBinding:            p.get("numa_binding", "").value,
		SignalsToHandle:        p.get("signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT").value,
		VirtualLocalRank:       p.flag("virtual_local_rank"),
		TrainingScript:         p.script,
		TrainingScriptArgs:     p.scriptArgs,
	}
	var err error
	if c.NNodesMin, c.NNodesMax, err = parseNNodes(p.get("nnodes", "1:1")); err != nil {
		return Config{}, err
	}
	if c.NProcPerNode, err = parseNProc(p.get("nproc_per_node", "1")); err != nil {
		return Config{}, err
	}
	if c.MaxRestarts, err = intAtLeast(p.get("max_restarts", "0"), 0, math.MaxInt32); err != nil {
		return Config{}, err
	}
	if c.NodeRank, err = intAtLeast(p.get("node_rank", "0"), 0, math.MaxInt32); err != nil {
		return Config{}, err
	}
	if c.MasterPort, err = masterPort(p.get("master_port", "29500")); err != nil {
		return Config{}, err
	}
	if addr := p.get("master_addr", "127.0.0.1"); pyStrip(addr.value) == "" {
		return Config{}, &userr.InputError{
			Where:   addr.where,
			Problem: "the master address is empty",
			Fix:     "give node 0's host name or address, or leave --master-addr out (torchrun's default is 127.0.0.1)",
		}
	}
	if c.MonitorInterval, err = parseInterval(p.get("monitor_interval", "0.1")); err != nil {
		return Config{}, err
	}
	if _, err = parseSignals(p.get("signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT")); err != nil {
		return Config{}, err
	}
	for _, dest := range []string{"redirects", "tee"} {
		if err := checkStd(p.get(dest, "0")); err != nil {
			return Config{}, err
		}
	}
	if err := checkRanksFilter(p.get("local_ranks_filter", "")); err != nil {
		return Config{}, err
	}
	if c.NoPython && c.Module && !c.RunPath {
		return Config{}, &userr.InputError{
			Where:   p.get("no_python", "").where,
			Problem: "Don't use both the '--no-python' flag and the '--module' flag at the same time.",
			Fix:     "drop -m/--module to run the script directly, or drop --no-python to run it with python -m",
		}
	}

	// run(): --standalone replaces whatever rendezvous the user gave.
	if c.Standalone {
		c.RdzvBackend = "c10d"
		c.RdzvEndpoint = "localhost:0"
		c.RdzvID = newID()
	}
	if c.RdzvConfigs, err = parseRdzvConf(p.get("rdzv_conf", "")); err != nil {
		return Config{}, err
	}
	// LaunchConfig.__post_init__: the rendezvous times out after 900 s
	// unless --rdzv-conf says otherwise.
	if _, set := c.RdzvConfigs["timeout"]; !set {
		c.RdzvConfigs["timeout"] = defaultRdzvTimeout
	}
	if ep, given := p.set["rdzv_endpoint"]; given && !c.Standalone {
		if err := checkEndpoint(ep, c.RdzvBackend, c.NNodesMax); err != nil {
			return Config{}, err
		}
	}
	if c.RdzvBackend == "static" {
		c.RdzvConfigs["rank"] = strconv.Itoa(c.NodeRank)
		if c.RdzvEndpoint == "" {
			c.RdzvEndpoint = c.MasterAddr + ":" + strconv.Itoa(c.MasterPort)
		}
	}
	return c, nil
}

// newUUID4 returns a random RFC 4122 version 4 UUID, as Python's uuid.uuid4().
func newUUID4() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; it aborts the program instead
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
