// Package envplan turns what the user asked for (a torchrun-compatible command
// line, a host list, facts gathered by preflight) into a Plan: for every node,
// the exact torchrun argv it will run and the environment it gets, each
// variable with its reason; for every rank, its GPU and CPUs.
//
// envplan is pure: it does no I/O, reads no environment and imports none of
// ssh, NVML or urfave/cli. Callers pass file contents and environment lookups
// in. The same input always yields the same Plan, which makes plans safe to
// golden-test and cheap to rebuild. Nothing here blocks, so nothing takes a
// context; every function is safe for concurrent use.
//
// Errors caused by the user's input are *userr.InputError values: they say what is
// wrong, where, and how to fix it, and main maps them to exit code 2.
package envplan
