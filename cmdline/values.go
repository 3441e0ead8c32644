package cmdline

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorun/gorun/internal/lazyre"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
)

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
	stdValue   = lazyre.New(`^[0123]\n?$`)
	stdMapping = lazyre.New(`^(?:[0-9]:[0123],)*[0-9]:[0123]\n?$`)
)

func checkStd(s setting) error {
	if stdValue().MatchString(s.value) || stdMapping().MatchString(s.value) {
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

// signalNames are the signals --signals-to-handle may name: torchrun's
// four stops, and those gorun passes on to the workers without stopping
// anything.
var signalNames = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT, "SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT,
	"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGALRM": syscall.SIGALRM, "SIGXCPU": syscall.SIGXCPU,
	"SIGPWR": syscall.SIGPWR,
}

// parseSignals reads --signals-to-handle (torchrun's names, comma
// separated, as signal.Signals[name] takes them) and returns the signals
// gorun passes on: SIGUSR1 and SIGUSR2 always, and each other non-stop
// signal named. The stop signals are handled whether named or not.
func parseSignals(s setting) ([]syscall.Signal, error) {
	pass := []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2}
	for _, name := range strings.Split(s.value, ",") {
		name = strings.TrimSpace(name)
		sig, ok := signalNames[name]
		if !ok {
			known := make([]string, 0, len(signalNames))
			for n := range signalNames {
				known = append(known, n)
			}
			sort.Strings(known)
			return nil, &userr.InputError{Where: s.where, Problem: fmt.Sprintf("%s is not a signal gorun handles", userr.Quote(name)),
				Fix: "give a comma-separated list of " + strings.Join(known, ", ")}
		}
		if !wire.IsStopSignal(sig) && !slices.Contains(pass, sig) {
			pass = append(pass, sig)
		}
	}
	return pass, nil
}
