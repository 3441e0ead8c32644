// Package cpuset reads and writes sets of CPU ids in the kernel's cpulist
// form ("0-3,8,10-11", as in /sys/devices/system/node/node0/cpulist and
// the --cpu-list of taskset), and does the set algebra CPU binding needs:
// union, intersection, difference, and splitting a node's CPUs among its
// ranks the way torch's exclusive NUMA binding does.
//
// Sets are sorted slices of distinct ids; every function that takes one
// expects that form, and Parse always returns it. cpuset does no I/O (the
// callers read sysfs or sched_getaffinity) and keeps no state; its
// functions are safe for concurrent use and never modify their arguments.
package cpuset
