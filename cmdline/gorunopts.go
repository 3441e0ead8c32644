package cmdline

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/userr"
)

// gorunRule is what makes an option one of gorun's own rather than
// torchrun's: where its value goes in Options, what it holds before argv is
// read, and what it cannot be combined with.
type gorunRule struct {
	// set stores a value in o once it is known to be non-empty and one of
	// the option's choices; value is "" for a flag. typed is the option as
	// spelled on argv and argi its index there, for messages.
	set func(o *Options, typed string, argi int, value string) error
	// def, when not "", is stored through set before argv is read.
	def string
	// check, when not nil, runs once the whole command line is read, if
	// the option was given; given maps the dest of every gorun option on
	// argv to its spelling as typed.
	check func(o *Options, given map[string]string) error
}

// gorunTable declares gorun's own options, in `gorun --help` order. Each
// row is the whole of an option: adding one is adding a row (and a field to
// Options). They share torchrun's prefix namespace, so a new name must not
// be a prefix of a torchrun option or have one as a prefix
// (TestGorunNamesDoNotShadowTorchrun); only dashed spellings exist.
func gorunTable() []*optionSpec {
	return []*optionSpec{
		gorunText("hosts", "--hosts", func(o *Options) *string { return &o.Hosts }),
		gorunText("hostfile", "--hostfile", func(o *Options) *string { return &o.Hostfile }),
		gorunText("include", "--include", func(o *Options) *string { return &o.Include }),
		gorunText("exclude", "--exclude", func(o *Options) *string { return &o.Exclude }).checked(notWithInclude),
		gorunValue("env", "--env", setEnv),
		gorunText("torchrun", "--torchrun", func(o *Options) *string { return &o.Torchrun }).byDefault("torchrun"),
		gorunFlag("dry_run", "--dry-run", func(o *Options) *bool { return &o.DryRun }),
		gorunText("format", "--format", func(o *Options) *string { return &o.Format }).oneOf("table", "json", "shell").byDefault("table").checked(needsDryRun),
		gorunText("preflight", "--preflight", func(o *Options) *string { return &o.Preflight }).oneOf("on", "warn", "off").byDefault("on"),
		gorunText("launcher", "--launcher", func(o *Options) *string { return &o.Launcher }).oneOf("auto", "ssh", "srun").byDefault("auto"),
		gorunText("preflight_bandwidth", "--preflight-bandwidth", func(o *Options) *string { return &o.PreflightBandwidth }).oneOf("off", "node", "all"),
		gorunText("ssh_config", "--ssh-config", func(o *Options) *string { return &o.SSHConfig }),
		gorunText("ssh_user", "--ssh-user", func(o *Options) *string { return &o.SSHUser }),
		gorunValue("ssh_port", "--ssh-port", setSSHPort),
		gorunText("ssh_identity", "--ssh-identity", func(o *Options) *string { return &o.SSHIdentity }),
		gorunText("known_hosts", "--known-hosts", func(o *Options) *string { return &o.KnownHosts }),
		gorunFlag("ssh_accept_new", "--ssh-accept-new", func(o *Options) *bool { return &o.SSHAcceptNew }),
		gorunText("ssh_command", "--ssh-command", func(o *Options) *string { return &o.SSHCommand }),
		gorunText("remote_gorun", "--remote-gorun", func(o *Options) *string { return &o.RemoteGorun }),
		gorunValue("hang_timeout", "--hang-timeout", setHangTimeout).byDefault(DefaultHangTimeout.String()),
		gorunValue("hang_timeout_floor", "--hang-timeout-floor", setHangTimeoutFloor).byDefault(DefaultHangTimeoutFloor.String()),
		gorunText("flight_recorder", "--flight-recorder", func(o *Options) *string { return &o.FlightRecorder }),
		gorunText("telemetry", "--telemetry", func(o *Options) *string { return &o.Telemetry }),
		gorunValue("telemetry_interval", "--telemetry-interval", setTelemetryInterval).byDefault(DefaultTelemetryInterval.String()),
		gorunText("report", "--report", func(o *Options) *string { return &o.Report }),
		gorunText("summary", "--summary", func(o *Options) *string { return &o.Summary }),
		gorunText("warm_restart", "--warm-restart", func(o *Options) *string { return &o.WarmRestart }).oneOf("on", "early", "off").byDefault("on"),
		gorunValue("stop_grace", "--stop-grace", setStopGrace).byDefault(DefaultStopGrace.String()),
		gorunValue("shutdown_timeout", "--shutdown-timeout", setShutdownTimeout).also("--shutdown_timeout"),
		gorunValue("prewarm", "--prewarm", setPrewarm).byDefault("auto"),
		gorunValue("fanout", "--fanout", setFanout),
		gorunFlag("timestamps", "--timestamps", func(o *Options) *bool { return &o.Timestamps }),
		gorunFlag("worker_timestamps", "--worker-timestamps", func(o *Options) *bool { return &o.WorkerTimestamps }),
		gorunValue("step_pattern", "--step-pattern", setStepPattern),
		gorunValue("checkpoint_pattern", "--checkpoint-pattern", setCheckpointPattern),
	}
}

// gorunValue declares a gorun option that takes a value, stored by set.
func gorunValue(dest, name string, set func(o *Options, typed string, argi int, value string) error) *optionSpec {
	return &optionSpec{names: []string{name}, dest: dest, kind: kindValue, gorun: &gorunRule{set: set}}
}

// gorunText declares a gorun option whose value is stored as it is, in the
// field that field returns.
func gorunText(dest, name string, field func(*Options) *string) *optionSpec {
	return gorunValue(dest, name, func(o *Options, _ string, _ int, value string) error {
		*field(o) = value
		return nil
	})
}

// gorunFlag declares a gorun option that takes no value and sets a field.
func gorunFlag(dest, name string, field func(*Options) *bool) *optionSpec {
	return &optionSpec{names: []string{name}, dest: dest, kind: kindFlag, gorun: &gorunRule{
		set: func(o *Options, _ string, _ int, _ string) error {
			*field(o) = true
			return nil
		},
	}}
}

// oneOf limits the option's values to choices.
func (s *optionSpec) oneOf(choices ...string) *optionSpec { s.choices = choices; return s }

// also gives the option another spelling (torchrun's underscore form).
func (s *optionSpec) also(name string) *optionSpec { s.names = append(s.names, name); return s }

// byDefault gives the option the value def before argv is read.
func (s *optionSpec) byDefault(def string) *optionSpec { s.gorun.def = def; return s }

// checked adds a check of the whole command line, run when the option is
// given.
func (s *optionSpec) checked(check func(o *Options, given map[string]string) error) *optionSpec {
	s.gorun.check = check
	return s
}

// gorunDefaults returns Options as they are before argv is read: every
// gorun option's default, stored by its own setter.
func gorunDefaults(specs []*optionSpec) Options {
	var o Options
	for _, s := range specs {
		if s.gorun == nil || s.gorun.def == "" {
			continue
		}
		if err := s.gorun.set(&o, s.canonical(), -1, s.gorun.def); err != nil {
			// A table whose default its own setter refuses is a bug
			// that every test of the parser shows.
			panic(fmt.Sprintf("cmdline: default of %s: %v", s.canonical(), err))
		}
	}
	return o
}

func setEnv(o *Options, typed string, argi int, value string) error {
	if err := checkEnvFlag(fmt.Sprintf("%s (argument %d)", typed, argi+1), value); err != nil {
		return err
	}
	o.Env = append(o.Env, value)
	return nil
}

func setSSHPort(o *Options, typed string, _ int, value string) error {
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 || n > 65535 {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("invalid port %s", userr.Quote(value)), Fix: "give a port number from 1 to 65535"}
	}
	o.SSHPort = n
	return nil
}

func setHangTimeout(o *Options, typed string, _ int, value string) error {
	if value == "auto" {
		o.HangTimeout, o.HangAuto = DefaultHangTimeout, true // until something is learned
		return nil
	}
	d, err := parseDuration(value)
	if err != nil {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is neither a duration nor auto", userr.Quote(value)),
			Fix: "give a duration such as 90s, 20m or 1h (plain numbers are seconds; the default is 30m), auto to learn it from earlier runs, or 0 to turn hang detection off"}
	}
	if d > 0 && d < MinHangTimeout {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is shorter than %v: every job would be taken for hung within seconds", userr.Quote(value), MinHangTimeout),
			Fix: fmt.Sprintf("give at least %v (the default is 30m; 0 turns hang detection off)", MinHangTimeout)}
	}
	o.HangTimeout, o.HangAuto = d, false
	return nil
}

func setHangTimeoutFloor(o *Options, typed string, _ int, value string) error {
	d, err := parseDuration(value)
	if err != nil || d < MinHangTimeout {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a duration of at least %v", userr.Quote(value), MinHangTimeout),
			Fix: fmt.Sprintf("give a duration such as 10m (the default) or 2m; at least %v", MinHangTimeout)}
	}
	o.HangTimeoutFloor = d
	return nil
}

// MinHangTimeout is the shortest --hang-timeout taken: progress is looked
// at about once a second (a heartbeat file's touch, a worker's join of the
// store), and a healthy worker can be silent for a few seconds between
// steps, so anything shorter stops healthy jobs.
const MinHangTimeout = 5 * time.Second

func setStopGrace(o *Options, typed string, _ int, value string) error {
	d, err := parseDuration(value)
	if err != nil || d <= 0 {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a positive duration", userr.Quote(value)),
			Fix: "give the time the workers have to save their state after SIGTERM, such as 30s, 2m or 10m (plain numbers are seconds; the default is 30s)"}
	}
	o.StopGrace = d
	return nil
}

// setShutdownTimeout takes torchrun's --shutdown-timeout (2.12 and
// later: the workers' time between SIGTERM and SIGKILL when torchrun is
// stopped by a signal), which is what --stop-grace means to gorun. It
// stands for --stop-grace where that is not given (applyShutdownTimeout).
func setShutdownTimeout(o *Options, typed string, _ int, value string) error {
	d, err := parseDuration(value)
	if err != nil || d <= 0 {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a positive number of seconds", userr.Quote(value)),
			Fix: "give the workers' time after SIGTERM in seconds, as torchrun takes it (30), or use gorun's --stop-grace 30s"}
	}
	o.ShutdownTimeout = d
	return nil
}

// ShutdownTimeoutVar is torchrun's variable for --shutdown-timeout's
// default (2.12 and later).
const ShutdownTimeoutVar = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"

// applyShutdownTimeout sets StopGrace from torchrun's names for it where
// --stop-grace was not given: --shutdown-timeout, else
// TORCH_ELASTIC_SHUTDOWN_TIMEOUT (docs/guide.md, "Signals and preemption": --stop-grace wins
// over both, the flag over the variable).
func (p *parser) applyShutdownTimeout(getenv func(string) string) error {
	if _, given := p.gorunGiven["stop_grace"]; given {
		return nil
	}
	if _, given := p.gorunGiven["shutdown_timeout"]; given {
		p.gorun.StopGrace = p.gorun.ShutdownTimeout
		return nil
	}
	if v := getenv(ShutdownTimeoutVar); v != "" {
		d, err := parseDuration(v)
		if err != nil || d <= 0 {
			return &userr.InputError{Where: ShutdownTimeoutVar, Problem: fmt.Sprintf("%s is not a positive number of seconds", userr.Quote(v)),
				Fix: "set it to the workers' time after SIGTERM in seconds (30), unset it, or give --stop-grace"}
		}
		p.gorun.StopGrace = d
	}
	return nil
}

// DefaultFanout is --fanout's default: pdsh's -f, and under OpenSSH's
// MaxStartups (10:30:100) of a jump host every connection goes through,
// past which it drops new ones at random.
const DefaultFanout = 32

// MaxFanout bounds --fanout: past it, the head's own threads would only
// queue.
const MaxFanout = 4096

// setFanout reads --fanout: how many nodes at once.
func setFanout(o *Options, typed string, _ int, value string) error {
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 || n > MaxFanout {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a node count from 1 to %d", userr.Quote(value), MaxFanout),
			Fix: fmt.Sprintf("give how many nodes gorun dials, checks or starts at once, such as 64 (the default is %d; behind a jump host keep it under its sshd's MaxStartups)", DefaultFanout)}
	}
	o.Fanout = n
	return nil
}

// setPrewarm reads --prewarm: off, auto (the default: torch, where the
// workers are Python scripts that import it), or the modules each
// pooled worker interpreter imports ahead, comma-separated (torch, or
// torch,numpy).
func setPrewarm(o *Options, typed string, _ int, value string) error {
	o.PrewarmAuto = value == "auto"
	switch value {
	case "off":
		o.Prewarm = nil
		return nil
	case "auto":
		o.Prewarm = []string{"torch"}
		return nil
	}
	var mods []string
	for _, m := range strings.Split(value, ",") {
		m = strings.TrimSpace(m)
		if !pythonModuleName(m) {
			return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a Python module name", userr.Quote(m)),
				Fix: "give the modules each worker's interpreter imports ahead, comma-separated, such as torch or torch,numpy; or auto (the default), or off"}
		}
		mods = append(mods, m)
	}
	o.Prewarm = mods
	return nil
}

// pythonModuleName reports whether s is a dotted Python module name.
func pythonModuleName(s string) bool {
	if s == "" {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || part[0] >= '0' && part[0] <= '9' {
			return false
		}
		for _, r := range part {
			if r != '_' && !(r >= 'a' && r <= 'z') && !(r >= 'A' && r <= 'Z') && !(r >= '0' && r <= '9') {
				return false
			}
		}
	}
	return true
}

func setTelemetryInterval(o *Options, typed string, _ int, value string) error {
	d, err := parseDuration(value)
	if err != nil || d < MinTelemetryInterval && d != 0 {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%s is not a sampling period of at least %v", userr.Quote(value), MinTelemetryInterval),
			Fix: "give a period such as 1s or 500ms (plain numbers are seconds; the default is 1s); 0 turns GPU telemetry off"}
	}
	o.TelemetryInterval = d
	return nil
}

// notWithInclude refuses --exclude beside --include: both filter the same
// host list, and which one was meant cannot be guessed.
func notWithInclude(_ *Options, given map[string]string) error {
	include, ok := given["include"]
	if !ok {
		return nil
	}
	return &userr.InputError{
		Where:   given["exclude"],
		Problem: "cannot be combined with " + include,
		Fix:     "use either --include or --exclude",
	}
}

// needsDryRun refuses --format without --dry-run, where it would do
// nothing.
func needsDryRun(o *Options, given map[string]string) error {
	if o.DryRun {
		return nil
	}
	format := given["format"]
	return &userr.InputError{
		Where:   format,
		Problem: "says how --dry-run prints the plan, and --dry-run was not given",
		Fix:     "add --dry-run to print the plan without running, or drop " + format,
	}
}

// applyGorun records one of gorun's own options from argv. A value is
// never empty (it would mean the option's default to one reader and ""
// to another) and must be one of the option's choices.
func (p *parser) applyGorun(s *optionSpec, typed, value string, argi int) error {
	if s.kind == kindValue {
		if value == "" {
			return &userr.InputError{Where: typed, Problem: "empty value", Fix: "give a value or leave " + s.canonical() + " out"}
		}
		if err := checkType(s, typed, value); err != nil {
			return err
		}
	}
	if err := s.gorun.set(&p.gorun, typed, argi, value); err != nil {
		return err
	}
	p.gorunGiven[s.dest] = typed
	return nil
}

// checkGorun runs the checks of the gorun options given, in table order,
// once argv is read.
func (p *parser) checkGorun() error {
	for _, s := range p.specs {
		if s.gorun == nil || s.gorun.check == nil {
			continue
		}
		if _, given := p.gorunGiven[s.dest]; !given {
			continue
		}
		if err := s.gorun.check(&p.gorun, p.gorunGiven); err != nil {
			return err
		}
	}
	return nil
}

// checkPrewarm refuses --prewarm where no worker is a Python interpreter
// gorun starts: --no-python runs the script as a program of its own, and
// --run-path runs it inside torchrun's agent.
func (p *parser) checkPrewarm(cfg Config) error {
	if len(p.gorun.Prewarm) == 0 {
		return nil
	}
	if p.gorun.PrewarmAuto {
		if cfg.RunPath || cfg.NoPython {
			p.gorun.Prewarm = nil // no worker interpreter to warm: auto means none
		}
		return nil
	}
	var other string
	switch {
	case cfg.RunPath:
		other = "--run-path"
	case cfg.NoPython:
		other = "--no-python"
	default:
		return nil
	}
	return &userr.InputError{
		Where:   p.gorunGiven["prewarm"],
		Problem: "pre-imports modules in a Python interpreter for each worker, and " + other + " means the workers are not started as Python scripts",
		Fix:     "drop " + p.gorunGiven["prewarm"] + " (or give --prewarm off), or drop " + other,
	}
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

// setStepPattern reads --step-pattern: a regular expression (Go's RE2
// syntax, which Python's re shares for what a step line needs) with a
// named group "step" holding the step number, or "off".
func setStepPattern(o *Options, typed string, _ int, value string) error {
	if value == "off" {
		o.StepPattern = value
		return nil
	}
	re, err := regexp.Compile(value)
	switch {
	case err != nil:
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%q is not a regular expression: %v", value, err),
			Fix: `give one with a named group step, such as 'epoch \d+ batch (?P<step>\d+)', or off`}
	case re.SubexpIndex("step") < 0:
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%q has no group named step to hold the step number", value),
			Fix: `name the group that matches the number (?P<step>\d+), as in 'batch (?P<step>\d+)'`}
	}
	o.StepPattern = value
	return nil
}

// setCheckpointPattern reads --checkpoint-pattern: a regular expression
// a line that reports a saved checkpoint matches.
func setCheckpointPattern(o *Options, typed string, _ int, value string) error {
	if _, err := regexp.Compile(value); err != nil {
		return &userr.InputError{Where: typed, Problem: fmt.Sprintf("%q is not a regular expression: %v", value, err),
			Fix: "give the words the script prints when it has saved a checkpoint, such as 'checkpoint saved'"}
	}
	o.CheckpointPattern = value
	return nil
}

// StepsOff reports whether --step-pattern off turned the reading of
// steps (and goodput) off.
func (o Options) StepsOff() bool { return o.StepPattern == "off" }
