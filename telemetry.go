package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	// main_test.go declares a const secret, so the package takes another name here.
	secrets "github.com/gorun/gorun/internal/secret"
	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/telemetry"
)

// gpuSidecar is the node agent's sidecar (sshexec.ServeAgentWith): GPU
// telemetry for the job, sampled in the agent, so NVML is loaded there and
// never in a worker. Settings it cannot read turn telemetry off quietly:
// the job matters more.
func gpuSidecar(ctx context.Context, settings json.RawMessage, send func([]byte)) {
	var cfg telemetry.Config
	if json.Unmarshal(settings, &cfg) != nil {
		return
	}
	telemetry.Run(ctx, nvml.New(), cfg, func(f telemetry.Frame) {
		if b, err := json.Marshal(f); err == nil {
			send(b)
		}
	})
}

// gpuWatch is the head's side of telemetry: it takes every node's frames,
// prints findings and notices, keeps the status line, and writes the
// --telemetry and --report files.
type gpuWatch struct {
	interval   time.Duration
	reportPath string
	command    string
	preflight  string

	mu       sync.Mutex // frames come from every node's stream at once
	det      *telemetry.Detector
	status   *telemetry.Status
	report   *telemetry.Report
	jsonl    *telemetry.JSONL
	file     *os.File
	writeErr error
	noticed  map[string]bool
	start    time.Time
	plan     envplan.Plan
}

// newGPUWatch returns nil when telemetry is off (--telemetry-interval 0).
// It creates the --telemetry file now, so a path that cannot be written is
// refused before anything starts.
func newGPUWatch(cl cmdline.CommandLine, args []string, preflightText string) (*gpuWatch, error) {
	o := cl.Gorun
	if o.TelemetryInterval <= 0 {
		if o.Telemetry != "" || o.Report != "" {
			return nil, &userr.InputError{Where: "--telemetry-interval 0", Problem: "turns GPU telemetry off, and --telemetry or --report needs it",
				Fix: "drop --telemetry-interval 0, or drop --telemetry and --report"}
		}
		return nil, nil
	}
	g := &gpuWatch{interval: o.TelemetryInterval, reportPath: o.Report, preflight: preflightText,
		command: "gorun " + shell.QuoteArgv(secrets.RedactArgs(args)), // the report is shared: no secret in it
		det:     telemetry.NewDetector(), status: telemetry.NewStatus(), noticed: map[string]bool{}, start: time.Now()}
	if o.Report != "" {
		g.report = telemetry.NewReport()
	}
	if o.Telemetry != "" {
		f, err := os.Create(o.Telemetry)
		if err != nil {
			return nil, &userr.InputError{Where: "--telemetry", Problem: err.Error(), Fix: "give a file path gorun can write"}
		}
		g.file, g.jsonl = f, telemetry.NewJSONL(f)
	}
	return g, nil
}

// attach gives every node's job of attempt k its sampling settings: the
// GPUs of the plan's ranks on that node, or every GPU where the plan does
// not know them.
func (g *gpuWatch) attach(plan envplan.Plan, k int, nodes []launch.Node) []launch.Node {
	if g == nil {
		return nodes
	}
	g.mu.Lock()
	g.plan = plan
	if g.report != nil {
		g.report.Mark(telemetry.Marker{Time: time.Now(), Label: fmt.Sprintf("attempt %d starts", k+1), Kind: "attempt"})
	}
	g.mu.Unlock()
	byHost := map[string]envplan.NodePlan{}
	for _, n := range plan.Nodes {
		byHost[n.Host] = n
	}
	for i := range nodes {
		cfg := telemetry.Config{Interval: g.interval, GPUs: planGPUs(byHost[nodes[i].Name])}
		nodes[i].Job.Sidecar, _ = json.Marshal(cfg)
	}
	return nodes
}

// planGPUs lists a node's GPUs with their ranks; nil when any rank's GPU
// is unknown.
func planGPUs(n envplan.NodePlan) []telemetry.GPU {
	byIndex := map[int]*telemetry.GPU{}
	for _, r := range n.Ranks {
		if r.GPU == nil {
			return nil
		}
		g := byIndex[*r.GPU]
		if g == nil {
			g = &telemetry.GPU{Index: *r.GPU}
			byIndex[*r.GPU] = g
		}
		g.Ranks = append(g.Ranks, r.Rank)
		g.LocalRanks = append(g.LocalRanks, r.LocalRank)
	}
	out := make([]telemetry.GPU, 0, len(byIndex))
	for _, g := range byIndex {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// frame is launch.Options.Telemetry: one frame from a node's agent.
func (g *gpuWatch) frame(node string, attempt int, payload []byte) string {
	var f telemetry.Frame
	if json.Unmarshal(payload, &f) != nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.Notice != "" {
		if g.noticed[node] {
			return "" // said once per node, not once per attempt
		}
		g.noticed[node] = true
		if g.report != nil {
			g.report.Notice(node, f.Notice)
		}
		return fmt.Sprintf("gorun: %s: %s; GPU telemetry is off there\n", node, userr.Printable(f.Notice))
	}
	if f.Sample == nil {
		return ""
	}
	s := *f.Sample
	s.Node, s.Attempt = node, attempt
	if g.jsonl != nil && g.writeErr == nil {
		g.writeErr = g.jsonl.Write(s)
	}
	g.status.Observe(s)
	if g.report != nil {
		g.report.Add(s)
	}
	var msg strings.Builder
	for _, fd := range g.det.Observe(s) {
		if g.report != nil {
			g.report.Finding(fd)
		}
		msg.WriteString(userr.Printable(fd.String()))
		msg.WriteByte('\n')
	}
	return msg.String()
}

// statusLine is launch.Options.Status.
func (g *gpuWatch) statusLine(lines int64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status.Line(time.Now(), lines)
}

// failed is launch.Options.Failed: the failure goes on the report's time
// axis.
func (g *gpuWatch) failed(k int, f launch.Failure) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.report != nil {
		g.report.Mark(telemetry.Marker{Time: time.Now(), Kind: "failure",
			Label: fmt.Sprintf("attempt %d: %s failed (%s)", k+1, f.Node, f.Reason)})
	}
}

// finish closes the --telemetry file and writes the --report file; it
// says on diag what it could not write.
func (g *gpuWatch) finish(res launch.Result, runErr error, diag io.Writer) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.file != nil {
		err := g.writeErr
		if ferr := g.jsonl.Flush(); err == nil {
			err = ferr
		}
		if cerr := g.file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(diag, "gorun: --telemetry %s: %v\n", g.file.Name(), err)
		}
	}
	if g.report == nil {
		return
	}
	result := fmt.Sprintf("succeeded after %d attempt(s)", res.Attempts)
	if runErr != nil {
		result = fmt.Sprintf("did not succeed after %d attempt(s): %s", res.Attempts, userr.Printable(runErr.Error()))
		if res.Failure != nil {
			result += fmt.Sprintf(" (last failure: %s, %s)", res.Failure.Node, res.Failure.Reason)
		}
	}
	var plan bytes.Buffer
	_ = envplan.RenderTable(&plan, g.plan)
	info := telemetry.ReportInfo{Command: g.command, Start: g.start, End: time.Now(), Result: result,
		Preflight: g.preflight, Plan: plan.String()}
	var b bytes.Buffer
	err := g.report.WriteHTML(&b, info)
	if err == nil {
		err = os.WriteFile(g.reportPath, b.Bytes(), 0o644)
	}
	if err != nil {
		fmt.Fprintf(diag, "gorun: --report %s: %v\n", g.reportPath, err)
	}
}

// options fills the launch options telemetry needs; the status line only
// when diag is a terminal.
func (g *gpuWatch) options(o *launch.Options, diag io.Writer) {
	if g == nil {
		return
	}
	o.Telemetry = g.frame
	o.Failed = g.failed
	if isTerminal(diag) {
		width := terminalWidth(diag)
		o.Status = func(lines int64) string { return fitWidth(g.statusLine(lines), width) }
		o.StatusOut = diag
	}
}

// terminalWidth is w's width in columns, 0 when unknown.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// fitWidth cuts the status line to one row short of the terminal's width:
// a line that wrapped could not be erased with one carriage return.
func fitWidth(line string, width int) string {
	if width <= 1 {
		return line
	}
	r := []rune(line)
	if len(r) < width {
		return line
	}
	return string(r[:width-2]) + "…"
}
