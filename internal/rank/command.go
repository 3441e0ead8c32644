package rank

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gorun/gorun/internal/wire"
)

// workerCommand builds the worker's command from _rank's arguments, and,
// for a Python worker, what a pooled interpreter needs to become it (the
// rest of the PoolTake is filled in at the start).
func workerCommand(args []string, getenv func(string) string) (*exec.Cmd, *wire.PoolTake, error) {
	noPython, module := false, false
	for len(args) > 0 && args[0] != "--" {
		switch args[0] {
		case "--no-python":
			noPython = true
		case "-m":
			module = true
		default:
			return nil, nil, fmt.Errorf("unknown option %q (usage: %s [--no-python | -m] -- script args...)", args[0], wire.RankCommand)
		}
		args = args[1:]
	}
	if len(args) > 0 {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil, nil, fmt.Errorf("nothing to run (usage: %s [--no-python | -m] -- script args...)", wire.RankCommand)
	}
	argv := args
	var take *wire.PoolTake
	if !noPython {
		py := interpreter(getenv, os.Getppid())
		argv = []string{py, "-u"}
		if module {
			argv = append(argv, "-m")
		}
		argv = append(argv, args...)
		take = &wire.PoolTake{Module: module, Target: args[0], Args: args[1:]}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: argv}
	// Its own process group, so a signal torchrun sends to this group
	// reaches the worker once, through forwardSignals; and the parent-death
	// signal for when this process is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if take != nil {
		if take.Interp, err = filepath.Abs(path); err != nil {
			return nil, nil, err
		}
	}
	return cmd, take, nil
}

// workerEnv is the worker's environment: this process's, with torchrun's
// restart count and most restarts replaced by the group's (gorun owns
// restarts: each torchrun runs with --max-restarts=0) and Python's
// faulthandler armed, so a hang diagnosis can print every thread's stack.
// The user's own settings win.
func workerEnv(env []string, getenv func(string) string) []string {
	out := make([]string, 0, len(env)+2)
	count, most := getenv(wire.RestartCountVar), getenv(wire.MaxRestartsVar)
	haveFH := false
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		haveFH = haveFH || k == "PYTHONFAULTHANDLER"
		switch {
		case k == wire.RelaySocketVar || k == wire.PoolSocketVar || k == wire.GateVar || k == wire.LogDirVar || k == wire.StepsVar:
			continue // gorun's own: the worker's children must not speak for it, nor the worker see them
		case k == "TORCHELASTIC_RESTART_COUNT" && count != "", k == "TORCHELASTIC_MAX_RESTARTS" && most != "":
			continue
		}
		out = append(out, kv)
	}
	if count != "" {
		out = append(out, "TORCHELASTIC_RESTART_COUNT="+count)
	}
	if most != "" {
		out = append(out, "TORCHELASTIC_MAX_RESTARTS="+most)
	}
	if !haveFH {
		out = append(out, "PYTHONFAULTHANDLER=1")
	}
	return out
}
