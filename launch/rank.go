package launch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/envplan"
)

// ExecRank is the worker side of per-rank CPU binding (`gorun _rank --
// argv...`, started by torchrun in place of the worker). It binds itself to
// its local rank's CPUs, taken from envplan.RankCPUsVar by LOCAL_RANK, then
// execs argv, which inherits the binding. Like torchrun, it runs
// $PYTHON_EXEC in place of the planned interpreter when that is set. It
// returns only on failure.
func ExecRank(argv []string, getenv func(string) string) error {
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return fmt.Errorf("%s: nothing to run", envplan.RankCommand)
	}
	cpus, err := rankCPUs(getenv(envplan.RankCPUsVar), getenv("LOCAL_RANK"))
	if err != nil {
		return fmt.Errorf("%s: %w", envplan.RankCommand, err)
	}
	if py := getenv("PYTHON_EXEC"); py != "" && len(argv) > 2 && argv[1] == "-u" {
		argv = append([]string{py}, argv[1:]...)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("%s: %w", envplan.RankCommand, err)
	}
	// Affinity belongs to a thread; the exec happens on this same thread, and
	// the new program starts with its mask.
	runtime.LockOSThread()
	if len(cpus) > 0 {
		var set unix.CPUSet
		for _, c := range cpus {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("%s: bind local rank %s to CPUs %s: %w", envplan.RankCommand, getenv("LOCAL_RANK"), envplan.FormatCPUList(cpus), err)
		}
	}
	return syscall.Exec(path, argv, os.Environ())
}

// rankCPUs picks local rank's CPU set out of the ';'-separated lists; nil
// when no binding was planned.
func rankCPUs(lists, localRank string) ([]int, error) {
	if lists == "" {
		return nil, nil
	}
	r, err := strconv.Atoi(localRank)
	sets := strings.Split(lists, ";")
	if err != nil || r < 0 || r >= len(sets) {
		return nil, fmt.Errorf("LOCAL_RANK=%q does not index %s (%d sets)", localRank, envplan.RankCPUsVar, len(sets))
	}
	if sets[r] == "" {
		return nil, nil
	}
	return envplan.ParseCPUList(sets[r])
}
