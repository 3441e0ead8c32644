package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// procStat is the part of /proc/<pid>/stat the agent needs to find and
// signal a process tree.
type procStat struct {
	Pid   int
	State byte // R, S, D, Z, T, ...
	Ppid  int
	Pgrp  int
	Sid   int
}

// parseProcStat parses the contents of /proc/<pid>/stat. The command name
// sits in parentheses and may itself contain spaces and parentheses, so the
// fields after it are found from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	var st procStat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return st, errors.New("proc stat: no command name in parentheses")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid <= 0 {
		return st, fmt.Errorf("proc stat: bad pid %q", bytes.TrimSpace(b[:open]))
	}
	fields := bytes.Fields(b[closing+1:])
	// state ppid pgrp session ...
	if len(fields) < 4 || len(fields[0]) != 1 {
		return st, errors.New("proc stat: too few fields after command name")
	}
	nums := [3]int{}
	for i := range nums {
		n, err := strconv.Atoi(string(fields[i+1]))
		if err != nil {
			return st, fmt.Errorf("proc stat: field %d: %w", i+4, err)
		}
		nums[i] = n
	}
	st = procStat{Pid: pid, State: fields[0][0], Ppid: nums[0], Pgrp: nums[1], Sid: nums[2]}
	return st, nil
}

// readProcs reads the stat line of every process in /proc. Processes that
// vanish while it reads are skipped.
func readProcs() ([]procStat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	procs := make([]procStat, 0, len(names))
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		st, err := parseProcStat(b)
		if err != nil {
			continue
		}
		procs = append(procs, st)
	}
	return procs, nil
}

// descendants returns every process in procs whose parent chain leads to
// root, root itself excluded.
func descendants(procs []procStat, root int) []procStat {
	children := make(map[int][]int, len(procs))
	byPid := make(map[int]procStat, len(procs))
	for _, p := range procs {
		children[p.Ppid] = append(children[p.Ppid], p.Pid)
		byPid[p.Pid] = p
	}
	var out []procStat
	seen := map[int]bool{root: true}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c] {
				continue // pid reuse while reading /proc could make a cycle
			}
			seen[c] = true
			out = append(out, byPid[c])
			queue = append(queue, c)
		}
	}
	return out
}

// signalTree sends sig to every live descendant of root and to every
// process group those descendants lead or belong to, except root's own
// group. Signalling the groups as well catches a process forked between the
// /proc scan and the kill. It returns how many descendants it found that
// were not zombies.
func signalTree(root int, sig syscall.Signal) (int, error) {
	procs, err := readProcs()
	if err != nil {
		return 0, err
	}
	self := unix.Getpgrp()
	live := 0
	groups := map[int]bool{}
	for _, p := range descendants(procs, root) {
		if p.State == 'Z' || p.State == 'X' {
			continue
		}
		live++
		// ESRCH just means it died first.
		_ = unix.Kill(p.Pid, sig)
		if p.Pgrp > 1 && p.Pgrp != self {
			groups[p.Pgrp] = true
		}
	}
	for g := range groups {
		_ = unix.Kill(-g, sig)
	}
	return live, nil
}

// signalProcs sends sig to every live descendant of root but except, once
// each (no process groups), and returns how many it signalled.
func signalProcs(root, except int, sig syscall.Signal) (int, error) {
	procs, err := readProcs()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range descendants(procs, root) {
		if p.Pid == except || p.State == 'Z' || p.State == 'X' {
			continue
		}
		n++
		_ = unix.Kill(p.Pid, sig) // ESRCH just means it died first
	}
	return n, nil
}

// aloneLeft reports whether main is the only live descendant of root
// (zombies aside); false when /proc cannot be read.
func aloneLeft(root, main int) bool {
	procs, err := readProcs()
	if err != nil {
		return false
	}
	for _, p := range descendants(procs, root) {
		if p.Pid != main && p.State != 'Z' && p.State != 'X' {
			return false
		}
	}
	return true
}
