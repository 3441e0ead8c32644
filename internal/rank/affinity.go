package rank

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/internal/cpuset"
	"github.com/gorun/gorun/internal/wire"
)

// rankCPUs picks local rank's CPU set out of the ';'-separated lists; nil
// when no binding was planned.
func rankCPUs(lists, localRank string) ([]int, error) {
	if lists == "" {
		return nil, nil
	}
	r, err := strconv.Atoi(localRank)
	sets := strings.Split(lists, ";")
	if err != nil || r < 0 || r >= len(sets) {
		return nil, fmt.Errorf("LOCAL_RANK=%q does not index %s (%d sets)", localRank, wire.RankCPUsVar, len(sets))
	}
	if sets[r] == "" {
		return nil, nil
	}
	return cpuset.Parse(sets[r])
}

// bindThread locks the calling goroutine to its OS thread and binds that
// thread to cpus (none: no binding). Affinity belongs to a thread, and a
// child forked from it starts with its mask; the lock is never undone, so
// the thread the worker's parent-death signal is tied to stays this one.
func bindThread(cpus []int) error {
	runtime.LockOSThread()
	if len(cpus) == 0 {
		return nil
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return unix.SchedSetaffinity(0, &set)
}
