package cmdline

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
)

// ErrHelp is returned by Parse when the user asked for help
// (-h, --help, or an unambiguous prefix such as --he). main prints the help
// text and exits 0, as torchrun does.
var ErrHelp = errors.New("help requested")

// defaultRdzvTimeout is the rendezvous timeout in seconds torchrun's
// LaunchConfig puts in rdzv_configs when --rdzv-conf gives none.
const defaultRdzvTimeout = "900"

// placeholderRdzvID is the rendezvous id ParseWith uses for
// --standalone when it is given no id source, so that tests and golden plans
// stay deterministic. It has the shape of a uuid4, like torchrun's own id.
const placeholderRdzvID = "00000000-0000-4000-8000-000000000000"

// Parse parses a gorun launch command line: everything after the
// program name, `[gorun options] [torchrun options] training_script [script
// args...]`, with torchrun 2.11's argparse rules (prefixes, both spellings,
// PET_<DEST> defaults read through getenv). A --standalone run gets a fresh
// random uuid4 as its rendezvous id, like torchrun. Errors caused by the input
// are *userr.InputError; -h/--help returns ErrHelp.
func Parse(argv []string, getenv func(string) string) (CommandLine, error) {
	return ParseWith(argv, getenv, newUUID4)
}

// ParseWith is Parse with the source of the --standalone
// rendezvous id injected. A nil newID yields the fixed placeholder
// "00000000-0000-4000-8000-000000000000"; a nil getenv means an empty
// environment.
//
// Given lists the PET_ defaults that took effect first, in torchrun's
// declaration order, then the torchrun options on argv in the order typed,
// repeats included (the last one wins). A PET_ flag that reads as false and a
// PET_ value overridden on argv are not listed; gorun's own options never are.
//
// A prefix that matches both spellings of one option (--nproc matches
// --nproc-per-node and --nproc_per_node) is ambiguous, as argparse has it
// (checked against torchrun 2.11: cmdline/testdata/torchrun_parse_diff.py).
//
// Differences from torchrun, all deliberate:
//   - arguments after the training script are never inspected (some Python
//     versions refuse an ambiguous prefix there);
//   - gorun's own options share the prefix namespace, so three prefixes that
//     picked one torchrun option now are ambiguous: --h (--help), --re
//     (--redirects) and --t (--tee);
//   - an empty PET_ variable counts as unset (getenv cannot tell them apart);
//   - values torchrun only rejects once it runs (an empty training script,
//     --nproc-per-node 0, a negative --node-rank, a --master-port outside
//     1..65535, an empty --master-addr, a --rdzv-endpoint its backend cannot
//     use, a non-finite or negative --monitor-interval, PET_START_METHOD
//     outside spawn|fork|forkserver, a privateuse1 backend name for
//     --nproc-per-node) are refused here, before anything starts; so is an
//     --env for a variable torchrun sets for every worker itself (see
//     checkEnvFlag);
//   - an error echoes at most 80 characters of any value, and never the
//     value of an --env or the part after '=' of an unknown option (a
//     mistyped --env).
func ParseWith(argv []string, getenv func(string) string, newID func() string) (CommandLine, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if newID == nil {
		newID = func() string { return placeholderRdzvID }
	}
	p := newParser()
	if err := p.parseArgv(argv); err != nil {
		return CommandLine{}, err
	}
	if err := p.applyEnv(getenv); err != nil {
		return CommandLine{}, err
	}
	cfg, err := p.config(newID)
	if err != nil {
		return CommandLine{}, err
	}
	if err := p.checkGorun(); err != nil {
		return CommandLine{}, err
	}
	given := append(p.envGiven, p.argvGiven...)
	if given == nil {
		given = []Arg{}
	}
	return CommandLine{Gorun: p.gorun, Torchrun: cfg, Given: given}, nil
}

// TorchrunOptionNames lists the canonical (dashed) long name of every torchrun
// 2.11 launch option gorun accepts, in torchrun's --help order. -h/--help and
// the positional arguments are not included.
func TorchrunOptionNames() []string {
	var names []string
	for _, s := range optionTable() {
		if !s.gorun && s.kind != kindHelp {
			names = append(names, s.canonical())
		}
	}
	return names
}

// GorunOptionNames lists gorun's own options, which share torchrun's
// namespace on the command line but never reach torchrun.
func GorunOptionNames() []string {
	var names []string
	for _, s := range optionTable() {
		if s.gorun {
			names = append(names, s.canonical())
		}
	}
	return names
}

// optKind says how an option takes its value.
type optKind int

const (
	kindValue optKind = iota // --opt VALUE or --opt=VALUE
	kindFlag                 // store_true (torchrun: check_env)
	kindHelp                 // -h, --help
)

// valueType is the argparse type= of a torchrun option: the check argparse
// applies as soon as it reads the value.
type valueType int

const (
	typeStr valueType = iota
	typeInt
	typeFloat
)

// optionSpec is one option as argparse declares it.
type optionSpec struct {
	names   []string // canonical dashed long name first, then aliases, short last
	dest    string   // argparse dest (torchrun) or a key (gorun)
	kind    optKind
	typ     valueType
	choices []string
	env     bool // PET_<DEST> supplies the default (torchrun env/check_env)
	gorun   bool
}

func (s *optionSpec) canonical() string { return s.names[0] }

func (s *optionSpec) envName() string { return "PET_" + strings.ToUpper(s.dest) }

// optionTable declares every option in torchrun 2.11's order
// (torch/distributed/run.py get_args_parser), then gorun's. It is a function,
// not a variable, so nothing at package level can be mutated.
func optionTable() []*optionSpec {
	v := func(dest string, names ...string) *optionSpec {
		return &optionSpec{names: names, dest: dest, kind: kindValue, env: true}
	}
	f := func(dest string, names ...string) *optionSpec {
		return &optionSpec{names: names, dest: dest, kind: kindFlag, env: true}
	}
	typed := func(s *optionSpec, t valueType) *optionSpec { s.typ = t; return s }
	choice := func(s *optionSpec, c ...string) *optionSpec { s.choices = c; return s }
	noEnv := func(s *optionSpec) *optionSpec { s.env = false; return s }
	gv := func(dest string, names ...string) *optionSpec {
		return &optionSpec{names: names, dest: dest, kind: kindValue, gorun: true}
	}
	gf := func(dest string, names ...string) *optionSpec {
		return &optionSpec{names: names, dest: dest, kind: kindFlag, gorun: true}
	}
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

		gv("hosts", "--hosts"),
		gv("hostfile", "--hostfile"),
		gv("include", "--include"),
		gv("exclude", "--exclude"),
		gv("env", "--env"),
		gv("torchrun", "--torchrun"),
		gf("dry_run", "--dry-run"),
		choice(gv("format", "--format"), "table", "json", "shell"),
		choice(gv("preflight", "--preflight"), "on", "warn", "off"),
		choice(gv("launcher", "--launcher"), "auto", "ssh", "srun"),
		choice(gv("preflight_bandwidth", "--preflight-bandwidth"), "off", "node", "all"),
		gv("ssh_config", "--ssh-config"),
		gv("ssh_user", "--ssh-user"),
		gv("ssh_port", "--ssh-port"),
		gv("ssh_identity", "--ssh-identity"),
		gv("known_hosts", "--known-hosts"),
		gf("ssh_accept_new", "--ssh-accept-new"),
		gv("remote_gorun", "--remote-gorun"),
		gv("hang_timeout", "--hang-timeout"),
		gv("flight_recorder", "--flight-recorder"),
		gv("telemetry", "--telemetry"),
		gv("telemetry_interval", "--telemetry-interval"),
		gv("report", "--report"),
	}
}

// setting is the effective value of one torchrun option and where it came
// from, so a later check can name the spelling the user typed.
type setting struct {
	value string
	where string // "--nnod", "-r", "PET_NNODES"
}

type parser struct {
	specs  []*optionSpec
	byName map[string]*optionSpec
	names  []string // every option string, in declaration order

	set       map[string]setting // torchrun dest -> value given on argv or PET_
	argvSet   map[string]bool
	argvGiven []Arg
	envGiven  []Arg
	unknown   []string

	script     string
	scriptArgs []string
	haveScript bool
	argi       int // index in argv of the option being applied, for errors

	gorun       Options
	includeFrom string
	excludeFrom string
	formatFrom  string // --format as typed, when given
}

func newParser() *parser {
	p := &parser{
		specs:   optionTable(),
		byName:  map[string]*optionSpec{},
		set:     map[string]setting{},
		argvSet: map[string]bool{},
		gorun:   Options{Torchrun: "torchrun", Format: "table", Preflight: "on", Launcher: "auto", HangTimeout: DefaultHangTimeout, TelemetryInterval: DefaultTelemetryInterval},
	}
	for _, s := range p.specs {
		for _, n := range s.names {
			p.byName[n] = s
			p.names = append(p.names, n)
		}
	}
	return p
}

// tokenKind is argparse's classification of one argv string: 'A' (an
// argument) or 'O' (an option, known, ambiguous or unknown).
type tokenKind int

const (
	tokArg tokenKind = iota
	tokOption
	tokAmbiguous
	tokUnknown
)

// match is an option string resolved to its option, with any value attached
// to it ("--nnodes=2", "-r3").
type match struct {
	spec        *optionSpec
	typed       string // the option part as typed: "--nnod", "-r"
	explicit    string
	hasExplicit bool
	sep         bool // the explicit value followed '='
	candidates  []*optionSpec
	names       []string // the option strings an ambiguous prefix matched
}

// argparse treats these as arguments, not options, when no option looks like
// a negative number (torchrun has none).
var negativeNumber = regexp.MustCompile(`^-(?:\d+|\d*\.\d+)\n?$`)

// classify follows argparse's _parse_optional and _get_option_tuples, except
// that candidates are counted per option, not per spelling.
func (p *parser) classify(tok string) (match, tokenKind) {
	if tok == "" || tok[0] != '-' {
		return match{}, tokArg
	}
	if s, ok := p.byName[tok]; ok {
		return match{spec: s, typed: tok}, tokOption
	}
	if len(tok) == 1 {
		return match{}, tokArg
	}
	// An exact option name before '=' always wins over prefix matches.
	if name, val, ok := strings.Cut(tok, "="); ok {
		if s, ok := p.byName[name]; ok {
			return match{spec: s, typed: name, explicit: val, hasExplicit: true, sep: true}, tokOption
		}
	}
	var found []match
	add := func(m match) {
		for _, f := range found {
			if f.spec == m.spec {
				return
			}
		}
		found = append(found, m)
	}
	prefix, val, hasEq := strings.Cut(tok, "=")
	var matched []string
	if strings.HasPrefix(tok, "--") {
		for _, n := range p.names {
			if strings.HasPrefix(n, prefix) {
				matched = append(matched, n)
				add(match{spec: p.byName[n], typed: prefix, explicit: val, hasExplicit: hasEq, sep: hasEq})
			}
		}
		// As argparse: a prefix of two spellings of one option
		// (--nproc: --nproc-per-node, --nproc_per_node) is ambiguous too.
		if len(found) == 1 && len(matched) > 1 {
			return match{typed: prefix, names: matched}, tokAmbiguous
		}
	} else {
		// A short option may carry its value: -r3.
		short := tok[:2]
		for _, n := range p.names {
			if n == short {
				add(match{spec: p.byName[n], typed: short, explicit: tok[2:], hasExplicit: true})
			} else if strings.HasPrefix(n, prefix) {
				add(match{spec: p.byName[n], typed: prefix, explicit: val, hasExplicit: hasEq, sep: hasEq})
			}
		}
	}
	switch {
	case len(found) == 1:
		return found[0], tokOption
	case len(found) > 1:
		m := match{typed: prefix}
		for _, f := range found {
			m.candidates = append(m.candidates, f.spec)
		}
		return m, tokAmbiguous
	case negativeNumber.MatchString(tok), strings.Contains(tok, " "):
		return match{}, tokArg
	}
	return match{typed: tok}, tokUnknown
}

// parseArgv walks argv once, as argparse does for this parser: options until
// the first argument or "--", then the script and, untouched, its arguments.
func (p *parser) parseArgv(argv []string) error {
	for i := 0; i < len(argv); i++ {
		tok := argv[i]
		if tok == "--" {
			if i+1 < len(argv) {
				p.setScript(argv[i+1], argv[i+2:])
			}
			break
		}
		m, kind := p.classify(tok)
		switch kind {
		case tokArg:
			rest := argv[i+1:]
			// argparse lets the script positional swallow the "--" that
			// ends the options when it comes right after the script.
			if len(rest) > 0 && rest[0] == "--" {
				rest = rest[1:]
			}
			p.setScript(tok, rest)
			return p.finishArgv()
		case tokAmbiguous:
			return ambiguousError(m)
		case tokUnknown:
			p.unknown = append(p.unknown, tok)
			continue
		}
		p.argi = i
		next, err := p.consume(m, argv, i)
		if err != nil {
			return err
		}
		i = next
	}
	return p.finishArgv()
}

func (p *parser) setScript(script string, args []string) {
	p.script = script
	p.scriptArgs = append([]string{}, args...)
	p.haveScript = true
}

func (p *parser) finishArgv() error {
	if !p.haveScript {
		return &userr.InputError{
			Where:   "training_script",
			Problem: "the training script is missing",
			Fix:     "put it after the options: gorun [options] train.py [script args]",
		}
	}
	if p.script == "" {
		return &userr.InputError{Where: "training_script", Problem: "the training script is an empty string", Fix: "name the script or module to run"}
	}
	if len(p.unknown) > 0 {
		const listed = 5
		shown := make([]string, 0, listed+1)
		for _, u := range p.unknown[:min(len(p.unknown), listed)] {
			shown = append(shown, unknownOption(u))
		}
		if len(p.unknown) > listed {
			shown = append(shown, fmt.Sprintf("and %d more", len(p.unknown)-listed))
		}
		return &userr.InputError{
			Where:   unknownOption(p.unknown[0]),
			Problem: "unrecognized arguments: " + strings.Join(shown, " "),
			Fix:     "see gorun --help; options go before the training script, its own arguments after it",
		}
	}
	return nil
}

// unknownOption shows an unrecognized option in an error: the part after
// '=' is left out, since the option may be a mistyped --env with a secret
// as its value, and the rest is cut to userr.MaxEcho runes.
func unknownOption(tok string) string {
	if name, _, ok := strings.Cut(tok, "="); ok {
		return userr.Echo(name) + "=…"
	}
	return userr.Echo(tok)
}

func ambiguousError(m match) error {
	names := m.names
	if names == nil {
		for _, s := range m.candidates {
			names = append(names, s.canonical())
		}
	}
	return &userr.InputError{
		Where:   m.typed,
		Problem: "ambiguous option: could match " + strings.Join(names, ", "),
		Fix:     "write more of the option's name",
	}
}

// consume applies the option matched at argv[i] (and, for a value option
// without an attached value, argv[i+1]) and returns the index of the last
// argv string it used. Short flags chain as argparse allows: -mr3 is -m -r 3.
func (p *parser) consume(m match, argv []string, i int) (int, error) {
	help := false
	for {
		switch m.spec.kind {
		case kindFlag, kindHelp:
			if m.hasExplicit {
				long := len(m.typed) > 1 && m.typed[1] == '-'
				if long || m.sep || m.explicit == "" || m.explicit[0] == '-' {
					return i, &userr.InputError{
						Where:   m.typed,
						Problem: fmt.Sprintf("takes no value (ignored explicit argument %s)", userr.Quote(m.explicit)),
						Fix:     "write " + m.typed + " alone",
					}
				}
			}
			if m.spec.kind == kindHelp {
				help = true
			} else if err := p.apply(m.spec, m.typed, ""); err != nil {
				return i, err
			}
			if !m.hasExplicit {
				if help {
					return i, ErrHelp
				}
				return i, nil
			}
			// -mXYZ: the rest names more short options.
			next := "-" + m.explicit[:1]
			s, ok := p.byName[next]
			if !ok {
				p.unknown = append(p.unknown, "-"+m.explicit)
				if help {
					return i, ErrHelp
				}
				return i, nil
			}
			rest := m.explicit[1:]
			m = match{spec: s, typed: next, explicit: rest, hasExplicit: rest != ""}
			if strings.HasPrefix(rest, "=") {
				m.explicit, m.sep = rest[1:], true
			}
		case kindValue:
			if help {
				// argparse has already collected -h; it runs first and exits.
				return i, ErrHelp
			}
			value := m.explicit
			if !m.hasExplicit {
				if i+1 >= len(argv) || argv[i+1] == "--" {
					return i, missingValue(m.typed)
				}
				if _, kind := p.classify(argv[i+1]); kind != tokArg {
					return i, missingValue(m.typed)
				}
				i++
				value = argv[i]
			}
			return i, p.apply(m.spec, m.typed, value)
		}
	}
}

func missingValue(typed string) error {
	return &userr.InputError{
		Where:   typed,
		Problem: "expected one argument",
		Fix:     fmt.Sprintf("write %s VALUE, or %s=VALUE when the value starts with '-'", typed, typed),
	}
}

// apply records one option from argv: typed checks first, as argparse does
// while it reads the value; a repeated option replaces the earlier value.
func (p *parser) apply(s *optionSpec, typed, value string) error {
	if s.gorun {
		return p.applyGorun(s, typed, value)
	}
	if s.kind == kindFlag {
		value = "1"
	} else if err := checkType(s, typed, value); err != nil {
		return err
	}
	p.set[s.dest] = setting{value: value, where: typed}
	p.argvSet[s.dest] = true
	a := Arg{Name: s.canonical(), Dest: s.dest, Value: value, IsFlag: s.kind == kindFlag}
	if a.IsFlag {
		a.Value = ""
	}
	p.argvGiven = append(p.argvGiven, a)
	return nil
}

func checkType(s *optionSpec, where, value string) error {
	switch s.typ {
	case typeInt:
		if _, ok := pyInt(value); !ok {
			return &userr.InputError{Where: where, Problem: fmt.Sprintf("invalid int value: %s", userr.Quote(value)), Fix: "give a whole number"}
		}
	case typeFloat:
		if _, ok := pyFloat(value); !ok {
			return &userr.InputError{Where: where, Problem: fmt.Sprintf("invalid float value: %s", userr.Quote(value)), Fix: "give a number of seconds, e.g. 0.5"}
		}
	}
	if s.choices != nil && !contains(s.choices, value) {
		return &userr.InputError{
			Where:   where,
			Problem: fmt.Sprintf("invalid choice: %s", userr.Quote(value)),
			Fix:     "choose from " + strings.Join(s.choices, ", "),
		}
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnvFlag checks one --env value, at where ("--env (argument 3)").
// Nothing after the first '=' is ever shown: the value may be a secret.
func checkEnvFlag(where, value string) error {
	key, _, ok := strings.Cut(value, "=")
	if !ok {
		return &userr.InputError{
			Where:   where,
			Problem: "expected KEY=VALUE, and there is no '=' (the value is not shown: it may be a secret)",
			Fix:     "write --env NAME=VALUE; NAME is letters, digits and '_', not starting with a digit",
		}
	}
	if !envKey.MatchString(key) {
		return &userr.InputError{
			Where:   where,
			Problem: fmt.Sprintf("expected KEY=VALUE, and %s is not a valid variable name", userr.Quote(key)),
			Fix:     "write --env NAME=VALUE; NAME is letters, digits and '_', not starting with a digit",
		}
	}
	if fix, set := torchrunWorkerVar(key); set {
		return &userr.InputError{
			Where:   where,
			Problem: fmt.Sprintf("torchrun sets %s for every worker itself, over any value given here", key),
			Fix:     fix,
		}
	}
	return nil
}

// torchrunWorkerVar reports whether torchrun 2.11 sets the variable for
// every worker, replacing what the environment holds, and how to change it
// instead. The list is torchrun's own: the local elastic agent's worker
// environment (LocalElasticAgent._start_workers), TORCHELASTIC_ERROR_FILE
// from the log specs, and TORCHELASTIC_SIGNALS_TO_HANDLE from
// launcher/api.py. Variables torchrun only defaults
// (TORCH_NCCL_ASYNC_ERROR_HANDLING, OMP_NUM_THREADS) or reads
// (TORCHELASTIC_ENABLE_FILE_TIMER, TORCHELASTIC_TIMER_FILE,
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) are the user's to set.
func torchrunWorkerVar(name string) (fix string, set bool) {
	const ranks = "ranks and sizes follow the rendezvous: use --nnodes, --nproc-per-node and the host list"
	switch name {
	case "MASTER_ADDR":
		return "use --master-addr (or --rdzv-endpoint)", true
	case "MASTER_PORT":
		return "use --master-port (or --rdzv-endpoint)", true
	case "RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE":
		return ranks, true
	case "LOCAL_RANK", "LOCAL_WORLD_SIZE":
		return "use --nproc-per-node, or --include/--exclude or CUDA_VISIBLE_DEVICES to pick GPUs", true
	case "ROLE_NAME":
		return "use --role", true
	case "TORCHELASTIC_RESTART_COUNT":
		return "gorun sets it to the attempt number; use --max-restarts", true
	case "TORCHELASTIC_MAX_RESTARTS":
		return "use --max-restarts", true
	case "TORCHELASTIC_RUN_ID":
		return "use --rdzv-id", true
	case "TORCHELASTIC_USE_AGENT_STORE":
		return "torchrun decides it from the rendezvous backend; use --rdzv-backend", true
	case "TORCHELASTIC_ERROR_FILE":
		return "torchrun points it at each worker's own error file; use --log-dir to choose where", true
	case "TORCHELASTIC_SIGNALS_TO_HANDLE":
		return "use --signals-to-handle", true
	}
	return "", false
}

// checkEndpoint checks a --rdzv-endpoint the way the backends built into
// torchrun read it (parse_rendezvous_endpoint, then the backend), more
// strictly where torchrun's reading is ambiguous: HOST, HOST:PORT or
// [IPV6]:PORT, HOST a valid host name or address (see hosts.CheckName),
// PORT 0 to 65535. The static backend needs a port, and not 0; port 0 (the
// OS picks one, as --standalone does) is for a single-node c10d
// rendezvous only, since no other node could learn the port. An IPv6
// address with a port must be in brackets: "::1:29500" is itself an
// address. Endpoints of other backends (plugins) are their own business.
func checkEndpoint(s setting, backend string, nnodesMax int) error {
	switch backend {
	case "static", "c10d", "etcd", "etcd-v2":
	default:
		return nil
	}
	bad := func(problem, fix string) error {
		return &userr.InputError{Where: s.where, Problem: problem, Fix: fix}
	}
	ep := pyStrip(s.value)
	if ep == "" {
		return bad("the rendezvous endpoint is empty", "give the store's host and port, e.g. node1:29500, or leave --rdzv-endpoint out")
	}
	host, port, hasPort := ep, "", false
	switch {
	case strings.HasPrefix(ep, "["):
		end := strings.IndexByte(ep, ']')
		if end < 0 {
			return bad(fmt.Sprintf("unclosed '[' in %s", userr.Quote(ep)), "write an IPv6 endpoint as [ADDRESS]:PORT, e.g. [::1]:29500")
		}
		host = ep[1:end]
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return bad(fmt.Sprintf("%s in brackets is not an IPv6 address", userr.Quote(host)), "use brackets only around IPv6 addresses")
		}
		switch rest := ep[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			port, hasPort = rest[1:], true
		default:
			return bad(fmt.Sprintf("unexpected %s after ']'", userr.Quote(rest)), "write [ADDRESS]:PORT")
		}
	case strings.Count(ep, ":") > 1:
		return bad(fmt.Sprintf("%s has more than one ':'", userr.Quote(ep)), "put an IPv6 address in brackets: [::1]:29500")
	default:
		host, port, hasPort = strings.Cut(ep, ":")
		if host == "" {
			return bad(fmt.Sprintf("%s has no host before ':'", userr.Quote(ep)), "write HOST:PORT, e.g. node1:29500")
		}
	}
	if err := hosts.CheckName(s.where, host); err != nil {
		return err
	}
	if !hasPort {
		if backend == "static" {
			return bad(fmt.Sprintf("%s has no port, and the static rendezvous needs one", userr.Quote(ep)), "write HOST:PORT, or use --master-addr and --master-port")
		}
		return nil
	}
	n, err := strconv.Atoi(port)
	if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" || err != nil || n > 65535 {
		return bad(fmt.Sprintf("the port of %s is not a number from 0 to 65535", userr.Quote(ep)), "write HOST:PORT, e.g. node1:29500")
	}
	if n == 0 && (backend != "c10d" || nnodesMax > 1) {
		return bad(fmt.Sprintf("port 0 in %s lets the store listen on a port that no other node learns", userr.Quote(ep)),
			"give a port number; port 0 suits only a single-node c10d rendezvous (as --standalone uses)")
	}
	return nil
}

func (p *parser) applyGorun(s *optionSpec, typed, value string) error {
	o := &p.gorun
	if s.kind == kindFlag {
		switch s.dest {
		case "dry_run":
			o.DryRun = true
		case "ssh_accept_new":
			o.SSHAcceptNew = true
		}
		return nil
	}
	if value == "" {
		return &userr.InputError{Where: typed, Problem: "empty value", Fix: "give a value or leave " + s.canonical() + " out"}
	}
	if err := checkType(s, typed, value); err != nil {
		return err
	}
	switch s.dest {
	case "hosts":
		o.Hosts = value
	case "hostfile":
		o.Hostfile = value
	case "include":
		o.Include, p.includeFrom = value, typed
	case "exclude":
		o.Exclude, p.excludeFrom = value, typed
	case "env":
		if err := checkEnvFlag(fmt.Sprintf("%s (argument %d)", typed, p.argi+1), value); err != nil {
			return err
		}
		o.Env = append(o.Env, value)
	case "torchrun":
		o.Torchrun = value
	case "format":
		o.Format, p.formatFrom = value, typed
	case "preflight":
		o.Preflight = value
	case "launcher":
		o.Launcher = value
	case "preflight_bandwidth":
		o.PreflightBandwidth = value
	case "ssh_config":
		o.SSHConfig = value
	case "ssh_user":
		o.SSHUser = value
	case "ssh_port":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > 65535 {
			return &userr.InputError{Where: typed, Problem: fmt.Sprintf("invalid port %s", userr.Quote(value)), Fix: "give a port number from 1 to 65535"}
		}
		o.SSHPort = n
	case "ssh_identity":
		o.SSHIdentity = value
	case "known_hosts":
		o.KnownHosts = value
	case "remote_gorun":
		o.RemoteGorun = value
	case "flight_recorder":
		o.FlightRecorder = value
	case "telemetry":
		o.Telemetry = value
	case "report":
		o.Report = value
	case "telemetry_interval":
		d, err := parseDuration(value)
		if err != nil || d < MinTelemetryInterval && d != 0 {
			return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a sampling period of at least %v", userr.Quote(value), MinTelemetryInterval),
				Fix: "give a period such as 1s or 500ms (plain numbers are seconds; the default is 1s); 0 turns GPU telemetry off"}
		}
		o.TelemetryInterval = d
	case "hang_timeout":
		d, err := parseDuration(value)
		if err != nil {
			return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a duration", userr.Quote(value)),
				Fix: "give a duration such as 90s, 20m or 1h (plain numbers are seconds; the default is 30m); 0 turns hang detection off"}
		}
		o.HangTimeout = d
	}
	return nil
}

func (p *parser) checkGorun() error {
	if p.gorun.Include != "" && p.gorun.Exclude != "" {
		return &userr.InputError{
			Where:   p.excludeFrom,
			Problem: "cannot be combined with " + p.includeFrom,
			Fix:     "use either --include or --exclude",
		}
	}
	if p.formatFrom != "" && !p.gorun.DryRun {
		return &userr.InputError{
			Where:   p.formatFrom,
			Problem: "says how --dry-run prints the plan, and --dry-run was not given",
			Fix:     "add --dry-run to print the plan without running, or drop " + p.formatFrom,
		}
	}
	return nil
}

// applyEnv supplies PET_<DEST> defaults for options not set on argv. A flag's
// variable is read as check_env does, bool(int(value)), whether or not the
// flag is also on argv (torchrun reads it when it builds its parser).
func (p *parser) applyEnv(getenv func(string) string) error {
	for _, s := range p.specs {
		if s.gorun || !s.env {
			continue
		}
		name := s.envName()
		raw := getenv(name)
		if raw == "" {
			continue
		}
		if s.kind == kindFlag {
			n, ok := pyInt(raw)
			if !ok {
				return &userr.InputError{
					Where:   name,
					Problem: fmt.Sprintf("%s is not an integer (torchrun reads it as bool(int(value)))", userr.Quote(raw)),
					Fix:     fmt.Sprintf("set %s=1 to turn %s on, 0 or unset to leave it off", name, s.canonical()),
				}
			}
			if n == 0 || p.argvSet[s.dest] {
				continue
			}
			p.set[s.dest] = setting{value: "1", where: name}
			p.envGiven = append(p.envGiven, Arg{Name: s.canonical(), Dest: s.dest, IsFlag: true, FromEnv: true})
			continue
		}
		if p.argvSet[s.dest] {
			continue
		}
		if err := checkType(s, name, raw); err != nil {
			return err
		}
		p.set[s.dest] = setting{value: raw, where: name}
		p.envGiven = append(p.envGiven, Arg{Name: s.canonical(), Dest: s.dest, Value: raw, FromEnv: true})
	}
	return nil
}

// get returns the effective value of a torchrun option, or its default.
func (p *parser) get(dest, def string) setting {
	if s, ok := p.set[dest]; ok {
		return s
	}
	return setting{value: def, where: "--" + strings.ReplaceAll(dest, "_", "-")}
}

func (p *parser) flag(dest string) bool { _, ok := p.set[dest]; return ok }

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

// parseNNodes follows parse_min_max_nnodes and config_from_args's
// `assert 0 < min_nodes <= max_nodes`.
func parseNNodes(s setting) (int, int, error) {
	bad := func(problem string) (int, int, error) {
		return 0, 0, &userr.InputError{Where: s.where, Problem: problem, Fix: "give a node count N or a range MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4"}
	}
	parts := strings.Split(s.value, ":")
	if len(parts) > 2 {
		return bad(fmt.Sprintf("nnodes=%s is not in \"MIN:MAX\" format", userr.Echo(s.value)))
	}
	var nums [2]int
	for i, part := range parts {
		n, ok := pyInt(part)
		if !ok || n > math.MaxInt32 || n < math.MinInt32 {
			return bad(fmt.Sprintf("%s is not a whole number", userr.Quote(part)))
		}
		nums[i] = int(n)
	}
	lo, hi := nums[0], nums[0]
	if len(parts) == 2 {
		hi = nums[1]
	}
	if lo < 1 {
		return bad(fmt.Sprintf("nnodes=%s: the minimum must be at least 1", userr.Echo(s.value)))
	}
	if lo > hi {
		return bad(fmt.Sprintf("nnodes=%s: the minimum is larger than the maximum", userr.Echo(s.value)))
	}
	return lo, hi, nil
}

// parseNProc accepts what determine_local_world_size accepts without torch:
// an integer (kept in canonical form) or a device word.
func parseNProc(s setting) (string, error) {
	if n, ok := pyInt(s.value); ok {
		if n < 1 || n > math.MaxInt32 {
			return "", &userr.InputError{Where: s.where, Problem: fmt.Sprintf("%s workers per node is not possible", userr.Echo(s.value)), Fix: "give at least 1"}
		}
		return strconv.FormatInt(n, 10), nil
	}
	switch s.value {
	case "auto", "cpu", "gpu", "xpu":
		return s.value, nil
	}
	return "", &userr.InputError{
		Where:   s.where,
		Problem: fmt.Sprintf("unsupported nproc_per_node value: %s", userr.Quote(s.value)),
		Fix:     "give a positive integer or one of auto, cpu, gpu, xpu",
	}
}

func intAtLeast(s setting, lo, hi int64) (int, error) {
	n, ok := pyInt(s.value)
	if !ok {
		return 0, &userr.InputError{Where: s.where, Problem: fmt.Sprintf("invalid int value: %s", userr.Quote(s.value)), Fix: "give a whole number"}
	}
	if n < lo || n > hi {
		return 0, &userr.InputError{Where: s.where, Problem: fmt.Sprintf("%s is out of range", userr.Echo(s.value)), Fix: fmt.Sprintf("give a number from %d to %d", lo, hi)}
	}
	return int(n), nil
}

// masterPort reads --master-port. Port 0 is refused although torchrun takes
// it: the store on node 0 would listen on a port the OS picks, which no
// other node (nor node 0's own workers, told MASTER_PORT=0) can learn.
func masterPort(s setting) (int, error) {
	const fix = "give a port number from 1 to 65535, or leave it out for torchrun's 29500"
	n, ok := pyInt(s.value)
	switch {
	case !ok:
		return 0, &userr.InputError{Where: s.where, Problem: fmt.Sprintf("invalid int value: %s", userr.Quote(s.value)), Fix: fix}
	case n == 0:
		return 0, &userr.InputError{Where: s.where, Problem: "port 0 would let node 0 listen on a port that no other process learns", Fix: fix}
	case n < 1 || n > 65535:
		return 0, &userr.InputError{Where: s.where, Problem: fmt.Sprintf("%s is out of range", userr.Echo(s.value)), Fix: fix}
	}
	return int(n), nil
}

func parseInterval(s setting) (float64, error) {
	f, ok := pyFloat(s.value)
	if !ok {
		return 0, &userr.InputError{Where: s.where, Problem: fmt.Sprintf("invalid float value: %s", userr.Quote(s.value)), Fix: "give a number of seconds, e.g. 0.5"}
	}
	// time.sleep refuses these once torchrun runs; JSON cannot carry NaN.
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, &userr.InputError{Where: s.where, Problem: fmt.Sprintf("%s is not a usable interval", userr.Echo(s.value)), Fix: "give a finite number of seconds >= 0, e.g. 0.5"}
	}
	return f, nil
}

// Std.from_str (torch/distributed/elastic/multiprocessing/api.py). Python's
// '$' also matches before a final newline.
var (
	stdValue   = regexp.MustCompile(`^[0123]\n?$`)
	stdMapping = regexp.MustCompile(`^(?:[0-9]:[0123],)*[0-9]:[0123]\n?$`)
)

func checkStd(s setting) error {
	if stdValue.MatchString(s.value) || stdMapping.MatchString(s.value) {
		return nil
	}
	return &userr.InputError{
		Where:   s.where,
		Problem: fmt.Sprintf("%s is not a stream selector", userr.Quote(s.value)),
		Fix:     "give 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local rank as 0:1,1:2",
	}
}

func checkRanksFilter(s setting) error {
	if s.value == "" {
		return nil
	}
	for _, part := range strings.Split(s.value, ",") {
		if _, ok := pyInt(part); !ok {
			return &userr.InputError{
				Where:   s.where,
				Problem: "--local_ranks_filter must be a comma-separated list of integers",
				Fix:     "e.g. --local-ranks-filter=0,1,2",
			}
		}
	}
	return nil
}

// parseRdzvConf follows _parse_rendezvous_config
// (torch/distributed/elastic/rendezvous/utils.py).
func parseRdzvConf(s setting) (map[string]string, error) {
	conf := map[string]string{}
	text := pyStrip(s.value)
	if text == "" {
		return conf, nil
	}
	for _, kv := range strings.Split(text, ",") {
		key, value, hasValue := strings.Cut(kv, "=")
		key = pyStrip(key)
		if key == "" {
			return nil, &userr.InputError{
				Where:   s.where,
				Problem: "The rendezvous configuration string must be in format <key1>=<value1>,...,<keyN>=<valueN>.",
				Fix:     "e.g. --rdzv-conf=join_timeout=900,read_timeout=60",
			}
		}
		value = pyStrip(value)
		if !hasValue || value == "" {
			return nil, &userr.InputError{
				Where:   s.where,
				Problem: fmt.Sprintf("The rendezvous configuration option '%s' must have a value specified.", userr.Echo(key)),
				Fix:     fmt.Sprintf("write %s=VALUE", userr.Echo(key)),
			}
		}
		conf[key] = value
	}
	return conf, nil
}

// pyStrip is Python's str.strip(): Unicode whitespace on both ends.
func pyStrip(s string) string { return strings.TrimFunc(s, unicode.IsSpace) }

// pyInt parses like Python's int(str): surrounding whitespace, a sign, and
// single underscores between ASCII digits. Values beyond int64 are refused.
func pyInt(s string) (int64, bool) {
	s = pyStrip(s)
	if !pyDigits.MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

var (
	pyDigits     = regexp.MustCompile(`^[+-]?[0-9](?:_?[0-9])*$`)
	pyFloatRe    = regexp.MustCompile(`^[+-]?(?:(?:[0-9](?:_?[0-9])*)(?:\.(?:[0-9](?:_?[0-9])*)?)?|\.[0-9](?:_?[0-9])*)(?:[eE][+-]?[0-9](?:_?[0-9])*)?$`)
	pyFloatWords = regexp.MustCompile(`^(?i)[+-]?(?:inf|infinity|nan)$`)
)

// pyFloat parses like Python's float(str), which unlike strconv refuses hex
// and accepts underscores between digits.
func pyFloat(s string) (float64, bool) {
	s = pyStrip(s)
	if pyFloatWords.MatchString(s) {
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	if !pyFloatRe.MatchString(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// newUUID4 returns a random RFC 4122 version 4 UUID, as Python's uuid.uuid4().
func newUUID4() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; it aborts the program instead
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// parseDuration reads a Go duration ("90s", "20m", "1h30m") or a plain
// number of seconds; negative values are refused.
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n < 0 || n > 1e9 {
			return 0, errors.New("out of range")
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("not a duration")
	}
	return d, nil
}
