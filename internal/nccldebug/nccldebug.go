// Package nccldebug names NCCL's debugging knobs, so that the plan
// (envplan, which keeps one the user set, with a warning) and preflight's
// NCCL lint (which warns about one left set) agree on the list.
//
// It does no I/O, holds no state but the list and imports nothing of
// gorun's, so pure code may use it: envplan imports none of NVML or ssh,
// and preflight none of the head's side.
package nccldebug

import "slices"

// knobs are the variables NCCL's documentation (env.rst) files under
// "Debugging": they "should not be used in production nor retained in
// scripts", though setting one is legitimate while chasing a problem. The
// union of the two lists gorun kept before, one in envplan (the debugging
// members of the knobs it leaves to NCCL) and one in preflight's NCCL lint,
// which added the channel and ring counts (with their pre-2.17 and pre-2.5
// names), NCCL_BUFFSIZE, NCCL_NTHREADS, the NVB/PXN/P2P-direct switches,
// NCCL_NET_GDR_READ, NCCL_CHECK_POINTERS and NCCL_LAUNCH_MODE. Sorted.
var knobs = []string{
	"NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_CHECK_POINTERS", "NCCL_IB_DISABLE",
	"NCCL_LAUNCH_MODE", "NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS",
	"NCCL_MIN_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_NET_GDR_LEVEL",
	"NCCL_NET_GDR_READ", "NCCL_NTHREADS", "NCCL_NVB_DISABLE", "NCCL_P2P_DIRECT_DISABLE",
	"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_PROTO", "NCCL_PXN_DISABLE",
	"NCCL_SHM_DISABLE",
}

// IsKnob reports whether name is one of NCCL's debugging variables.
func IsKnob(name string) bool {
	_, found := slices.BinarySearch(knobs, name)
	return found
}

// Knobs returns NCCL's debugging variables (see IsKnob), sorted.
func Knobs() []string {
	return slices.Clone(knobs)
}
