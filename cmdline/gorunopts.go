package cmdline

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gorun/gorun/internal/userr"
)

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
