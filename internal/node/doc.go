// Package node is what gorun runs on a node for the head, apart from the
// workers' supervisors (internal/rank): the node agent with its GPU
// sidecar (`gorun _agent`: ServeAgent, GPUSidecar), the preflight
// collector (`gorun _collect`: RunCollect, Collect), a node's side of
// the bandwidth check between two nodes (`gorun _bandwidth`:
// RunBandwidth) and the teardown check before a restart (`gorun
// _gpufree`: RunGPUFree). The head runs these through sshexec, as gorun
// itself uploaded to the node (or preinstalled there); each answers on
// stdout.
//
// It owns this machine's side effects on behalf of those commands: it is
// the only place that creates an NVML handle (nvml.New), it runs local
// commands (nvidia-smi, torchrun's Python), reads the local environment
// and /proc, and SIGKILLs what the teardown check finds of the job. It
// holds no logic of its own beyond that wiring, but for the teardown
// check (gpufree.go): what is collected and how it is judged is
// preflight's, what the agent does is internal/agent's, and the sampling is
// telemetry's. The teardown check kills only processes whose environment
// holds the run's marker (wire.RunIDVar), each through a pidfd checked
// again after it is opened, and reports others' processes without
// touching them. It never talks to other
// nodes except through the bandwidth check's own all_reduce, never parses
// gorun's command line, and never calls os.Exit: the agent's exit code is
// returned to main.
//
// Every call takes a context.Context first; cancelling it ends the
// collection (what was gathered is still returned), the bandwidth run, the
// sidecar's sampling, the teardown check's wait (it answers with what it
// saw) and the agent's job (a graceful stop of its whole process tree). A request's budget (preflight.Request.Budget) bounds the
// collection on top of that. GPUSidecar runs in the agent while the job
// lives, and settings it cannot read turn telemetry off quietly. The
// package keeps no state; an NVML handle lives for one call.
package node
