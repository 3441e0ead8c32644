package preflight

import (
	"fmt"
	"strings"
)

// SinfoArgv is the sinfo command line, run on the head, whose output
// CheckSlurmNodes reads: one line per node, "name|state|reason".
func SinfoArgv(nodes []string) []string {
	return []string{"sinfo", "--noheader", "--Node", "--nodes=" + strings.Join(nodes, ","), "--format=%N|%T|%E"}
}

// CheckSlurmNodes turns sinfo's view of the job's nodes into findings: a
// node Slurm marked down, drained, failing or not responding is a fail
// (Slurm itself will not run more work there), one being drained is a
// warning (the job may run, but the node leaves the pool when it ends).
func CheckSlurmNodes(sinfo []byte) []Finding {
	var out []Finding
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sinfo)), "\n") {
		node, rest, ok := strings.Cut(line, "|")
		if !ok || seen[node] {
			continue
		}
		seen[node] = true
		state, reason, _ := strings.Cut(rest, "|")
		sev, what := slurmState(state)
		if sev == SeverityOK {
			continue
		}
		evidence := "sinfo: " + state
		if reason != "" && reason != "none" {
			evidence += ", reason: " + reason
		}
		out = append(out, Finding{
			ID: "slurm.node.state", Severity: sev,
			Message:  fmt.Sprintf("Slurm reports %s as %s", node, what),
			Evidence: evidence,
			Remedy:   "ask the cluster's admins about the node (`scontrol show node " + node + "`), or leave it out: sbatch --exclude=" + node,
		})
	}
	return out
}

// slurmState grades one sinfo %T state ("allocated", "draining",
// "down*": the * means not responding).
func slurmState(state string) (Severity, string) {
	s := strings.ToLower(state)
	switch {
	case strings.HasSuffix(s, "*"):
		return SeverityFail, "not responding (" + state + ")"
	case strings.HasPrefix(s, "down"), strings.HasPrefix(s, "drained"), strings.HasPrefix(s, "fail"),
		strings.HasPrefix(s, "inval"), strings.HasPrefix(s, "maint"), strings.HasPrefix(s, "reboot"):
		return SeverityFail, state
	case strings.HasPrefix(s, "draining"), strings.HasPrefix(s, "drain"):
		return SeverityWarn, "draining: it takes no new work once this job ends"
	}
	return SeverityOK, ""
}
