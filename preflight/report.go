package preflight

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/secret"
)

// NodeReport is one node's facts and the findings about it.
type NodeReport struct {
	Host     string    `json:"host"`
	Facts    Facts     `json:"facts"`
	Findings []Finding `json:"findings"`
}

// Report is the outcome of preflight over all nodes. OK is false when any
// finding, on a node or across nodes, is a fail.
type Report struct {
	OK bool `json:"ok"`
	// Fault, when a check failed: "input" where one is of what the job
	// asks or brings (Finding.OfTheJob: any node like these fails it the
	// same way; gorun exits 2), "node" where all are of the nodes'
	// health (another node may pass; gorun exits 3).
	Fault    string       `json:"fault,omitempty"`
	Nodes    []NodeReport `json:"nodes"`
	Findings []Finding    `json:"findings"` // across nodes
	// Cross holds the all_reduce figures between node pairs
	// (`--bandwidth all`).
	Cross []CrossResult `json:"cross_bandwidth,omitempty"`
}

// NewReport assembles a Report: findings sorted worst first (stable, so
// checks keep their order within a severity) and OK computed. Every text it
// will print passes through secret.Redact once more: the facts' Env (a
// node running an older gorun sends it as it was) and each finding's
// message, evidence and remedy (error text from a node or SSH can quote
// anything), so a credential that slipped past a check is still hidden.
func NewReport(nodes []NodeReport, across []Finding) Report {
	r := Report{OK: true, Nodes: make([]NodeReport, len(nodes)), Findings: sortFindings(redactFindings(across))}
	for i, n := range nodes {
		n.Findings = sortFindings(redactFindings(n.Findings))
		if n.Facts.Env != nil {
			env := make(map[string]string, len(n.Facts.Env))
			for k, v := range n.Facts.Env {
				env[k] = secret.Redact(k, v)
			}
			n.Facts.Env = env
		}
		r.Nodes[i] = n
		if worst(n.Findings) == SeverityFail {
			r.OK = false
		}
	}
	if worst(r.Findings) == SeverityFail {
		r.OK = false
	}
	if !r.OK {
		r.Fault = "node"
		for _, fs := range append([][]Finding{r.Findings}, nodeFindings(r.Nodes)...) {
			for _, f := range fs {
				if f.OfTheJob() {
					r.Fault = "input"
				}
			}
		}
	}
	return r
}

func nodeFindings(nodes []NodeReport) [][]Finding {
	out := make([][]Finding, len(nodes))
	for i, n := range nodes {
		out[i] = n.Findings
	}
	return out
}

// OfTheJob reports whether f is a failure of what the job asks of a node
// or brings to it, not of the node's health: the torchrun command it
// names, the torch behind it, GPUs asked of a node with no GPU at all,
// the training script where it is not, a gorun that is not built for the
// node's architecture or glibc (gorun.fit).
// Every node like this one fails it the same way, so a retry elsewhere
// cannot help (README, "Exit codes").
func (f Finding) OfTheJob() bool {
	if f.Severity != SeverityFail {
		return false
	}
	switch f.ID {
	case "torch.torchrun", "torch.found", "driver.present", "script.present", "gorun.fit":
		return true
	}
	return false
}

// redactFindings returns fs with their texts as secret.Redact prints a
// value without a name.
func redactFindings(fs []Finding) []Finding {
	out := make([]Finding, len(fs))
	for i, f := range fs {
		f.Message = secret.Redact("", f.Message)
		f.Evidence = secret.Redact("", f.Evidence)
		f.Remedy = secret.Redact("", f.Remedy)
		out[i] = f
	}
	return out
}

func sortFindings(fs []Finding) []Finding {
	out := append([]Finding{}, fs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Severity.rank() > out[j].Severity.rank() })
	return out
}

func worst(fs []Finding) Severity {
	w := SeverityOK
	for _, f := range fs {
		if f.Severity.rank() > w.rank() {
			w = f.Severity
		}
	}
	return w
}

// maxClockSkew is how far a node's clock may be from the head's before the
// logs of different nodes stop lining up.
const maxClockSkew = time.Second

// CheckAcross compares nodes with each other: driver, torch, CUDA and NCCL
// versions, the training script, GPU model and count, and clocks (against
// the first node, the head). Nodes whose facts lack a value are left out
// of that comparison.
func CheckAcross(nodes []NodeReport) []Finding {
	if len(nodes) < 2 {
		return nil
	}
	var out []Finding
	same := func(id, what string, get func(Facts) string, sev Severity, remedy string) {
		groups := map[string][]string{}
		for _, n := range nodes {
			if v := get(n.Facts); v != "" {
				groups[v] = append(groups[v], n.Host)
			}
		}
		switch len(groups) {
		case 0:
			return
		case 1:
			for v := range groups {
				out = append(out, ok(id, "same "+what+" on every node", v))
			}
			return
		}
		vals := make([]string, 0, len(groups))
		for v := range groups {
			vals = append(vals, v)
		}
		sort.Strings(vals)
		var ev []string
		for _, v := range vals {
			ev = append(ev, fmt.Sprintf("%s: %s", v, strings.Join(groups[v], ",")))
		}
		out = append(out, Finding{ID: id, Severity: sev, Message: "nodes differ in " + what,
			Evidence: strings.Join(ev, "; "), Remedy: remedy})
	}
	same("across.driver", "NVIDIA driver version", func(f Facts) string { return f.Driver.DriverVersion }, SeverityWarn,
		"install the same driver everywhere")
	same("across.cuda_driver", "driver CUDA version", func(f Facts) string {
		if f.Driver.CUDADriverVersion == 0 {
			return ""
		}
		return cudaString(f.Driver.CUDADriverVersion)
	}, SeverityWarn, "install the same driver everywhere")
	same("across.torch", "torch version", func(f Facts) string { return f.Torch.Version }, SeverityFail,
		"use the same Python environment (container image or venv) on every node")
	same("across.torch_cuda", "torch CUDA version", func(f Facts) string { return f.Torch.CUDA }, SeverityFail,
		"use the same torch build on every node")
	same("across.nccl", "NCCL version", func(f Facts) string { return f.Torch.NCCL }, SeverityFail,
		"use the same torch/NCCL build on every node; mismatched NCCL versions hang or fail at init")
	same("across.script", "training script", func(f Facts) string { return f.ScriptSHA256 }, SeverityFail,
		"sync the code to every node (same commit, same file)")
	same("across.gpu_model", "GPU model", func(f Facts) string {
		names := map[string]bool{}
		for _, g := range f.GPUs {
			names[g.Name] = true
		}
		return strings.Join(sortedKeys(names), "+")
	}, SeverityWarn, "mixed GPU models run at the speed of the slowest; group like nodes")
	same("across.gpu_count", "GPU count", func(f Facts) string {
		if f.Source == "" {
			return ""
		}
		return fmt.Sprint(len(f.GPUs))
	}, SeverityWarn, "give --nproc-per-node explicitly, or use nodes with equal GPU counts")

	head := nodes[0].Facts.Time
	if !head.IsZero() {
		var skewed []string
		var worstSkew time.Duration
		for _, n := range nodes[1:] {
			if n.Facts.Time.IsZero() {
				continue
			}
			d := n.Facts.Time.Sub(head)
			if d < 0 {
				d = -d
			}
			worstSkew = max(worstSkew, d)
			if d > maxClockSkew {
				skewed = append(skewed, fmt.Sprintf("%s %s", n.Host, n.Facts.Time.Sub(head).Round(time.Millisecond)))
			}
		}
		if len(skewed) > 0 {
			out = append(out, Finding{ID: "across.clock", Severity: SeverityWarn,
				Message:  "node clocks differ from the head's by more than " + maxClockSkew.String() + "; log timestamps will not line up",
				Evidence: strings.Join(skewed, ", ") + " (includes collection delay)",
				Remedy:   "run chrony or systemd-timesyncd on every node"})
		} else {
			out = append(out, ok("across.clock", "node clocks agree with the head's", "largest difference "+worstSkew.Round(time.Millisecond).String()))
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WriteText renders the report for a terminal: a summary line, then each
// node with its findings worst first, evidence and remedies indented, then
// the findings across nodes. ok findings are listed in one line each.
func (r Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	verdict := "OK"
	if !r.OK {
		verdict = "FAIL"
	}
	all := append([]Finding{}, r.Findings...)
	for _, n := range r.Nodes {
		all = append(all, n.Findings...)
	}
	ew.printf("preflight: %s (%s) on %d node(s)\n", verdict, countLine(all), len(r.Nodes))
	for _, n := range r.Nodes {
		title := n.Host
		if n.Facts.Hostname != "" && n.Facts.Hostname != n.Host {
			title += " (" + n.Facts.Hostname + ")"
		}
		ew.printf("\n%s: %s\n", title, countLine(n.Findings))
		writeFindings(ew, n.Findings)
		writeBandwidth(ew, n.Facts.Bandwidth)
	}
	if len(r.Findings) > 0 {
		ew.printf("\nacross nodes: %s\n", countLine(r.Findings))
		writeFindings(ew, r.Findings)
		writeCross(ew, r.Cross)
	}
	return ew.err
}

func writeFindings(ew *errWriter, fs []Finding) {
	for _, f := range sortFindings(fs) {
		ew.printf("  %-4s %-26s %s\n", strings.ToUpper(string(f.Severity)), f.ID, f.Message)
		if f.Severity == SeverityOK {
			continue
		}
		if f.Evidence != "" {
			ew.printf("       evidence: %s\n", f.Evidence)
		}
		if f.Remedy != "" {
			ew.printf("       remedy:   %s\n", f.Remedy)
		}
	}
}

func countLine(fs []Finding) string {
	var c [3]int
	for _, f := range fs {
		c[f.Severity.rank()]++
	}
	return fmt.Sprintf("%d fail, %d warn, %d ok", c[2], c[1], c[0])
}

// errWriter keeps the first write error so rendering code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err != nil {
		return
	}
	_, e.err = fmt.Fprintf(e.w, format, args...)
}
