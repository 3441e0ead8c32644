// Package envplan is gorun's planner: it turns a parsed command line
// (cmdline.CommandLine), the job's hosts (hosts.Host) and the facts
// preflight gathered into a Plan: for every node, the exact torchrun argv
// it will run and the environment it gets, each variable with its reason;
// for every rank, its GPU and CPUs. It owns Build and its rules
// (rendezvous, node ranks, GPU and CPU binding, NCCL and flight-recorder
// variables), the Plan and Spec types, and the renderers (table, JSON,
// shell).
//
// envplan is pure: it does no I/O, reads no environment and imports none of
// ssh, NVML or urfave/cli. Reading the command line (cmdline), the host
// sources (hosts), redaction (internal/secret) and cpulists
// (internal/cpuset) live in their own packages. Callers pass contents and
// environment lookups in. The same input always yields the same Plan,
// which makes plans safe to golden-test and cheap to rebuild. Nothing here
// blocks, so nothing takes a context; every function is safe for
// concurrent use.
//
// Errors caused by the user's input are *userr.InputError values: they say
// what is wrong, where, and how to fix it, and main maps them to exit
// code 2.
package envplan
