package job

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/internal/secret"
	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/telemetry"
)

// noticeWait is how long a notice waits for the same notice from other
// nodes before it is printed with those that sent it so far.
const noticeWait = 2 * time.Second

// gpuWatch is the hook that is the head's side of telemetry: it gives
// every node's job its sampling settings, takes every node's frames,
// prints findings and notices, keeps the status line, and writes the
// --telemetry and --report files.
type gpuWatch struct {
	interval   time.Duration
	reportPath string
	command    string
	preflight  string
	ui         UI

	mu       sync.Mutex // frames come from every node's stream at once
	det      *telemetry.Detector
	status   *telemetry.Status
	use      *telemetry.RankUse // by attempt and rank, for the step stragglers (goodputLine)
	report   *telemetry.Report
	jsonl    *telemetry.JSONL
	file     *os.File
	writeErr error
	start    time.Time
	plan     envplan.Plan
	notices  notices
}

// newGPUWatch returns nil when telemetry is off (--telemetry-interval 0).
// It creates the --telemetry file now, so a path that cannot be written is
// refused before anything starts.
func newGPUWatch(cl cmdline.CommandLine, args []string, preflightText string, stamp schema.Stamp, outs outputs, ui UI) (*gpuWatch, error) {
	o := cl.Gorun
	if o.TelemetryInterval <= 0 {
		if o.Telemetry != "" || o.Report != "" {
			return nil, &userr.InputError{Where: "--telemetry-interval 0", Problem: "turns GPU telemetry off, and --telemetry or --report needs it",
				Fix: "drop --telemetry-interval 0, or drop --telemetry and --report"}
		}
		return nil, nil
	}
	g := &gpuWatch{interval: o.TelemetryInterval, reportPath: o.Report, preflight: preflightText, ui: ui,
		command: "gorun " + shell.QuoteArgv(secret.RedactArgs(args)), // the report is shared: no secret in it
		det:     telemetry.NewDetector(), status: telemetry.NewStatus(), use: telemetry.NewRankUse(), start: time.Now(),
		notices: notices{said: map[string]bool{}, heard: map[string]bool{}}}
	if o.Report != "" {
		g.report = telemetry.NewReport()
	}
	if o.Telemetry != "" {
		f, err := os.Create(o.Telemetry)
		if err != nil {
			return nil, &userr.InputError{Where: "--telemetry", Problem: err.Error(), Fix: "give a file path gorun can write"}
		}
		g.file, g.jsonl = f, telemetry.NewJSONL(f, stamp)
	}
	return g, nil
}

func (*gpuWatch) Name() string { return "telemetry" }

// Starting marks the attempt's start (and its replacements) in the
// report, and keeps its plan for the notices.
func (g *gpuWatch) Starting(a *Attempt) {
	g.mu.Lock()
	g.plan = a.Plan
	g.notices.nodes = len(a.Plan.Nodes)
	if g.report != nil {
		now := time.Now()
		for _, r := range a.Replaced {
			g.report.Mark(telemetry.Marker{Time: now, Kind: "replacement",
				Label: fmt.Sprintf("%s leaves the job (%s); spare %s takes node rank %d", r.left, userr.Printable(r.why), r.spare, r.rank)})
		}
		label := fmt.Sprintf("attempt %d starts", a.K+1)
		if hosts := planHosts(a.Plan); len(hosts) > 1 || len(a.Replaced) > 0 {
			label += " on " + strings.Join(hosts, ", ")
		}
		g.report.Mark(telemetry.Marker{Time: now, Label: label, Kind: "attempt"})
	}
	g.mu.Unlock()
}

// Shape gives every node's job of the attempt its sampling settings: the
// GPUs of the plan's ranks on that node, or every GPU where the plan does
// not know them.
func (g *gpuWatch) Shape(a *Attempt) {
	byHost := map[string]envplan.NodePlan{}
	for _, n := range a.Plan.Nodes {
		byHost[n.Host] = n
	}
	for i := range a.Nodes {
		cfg := telemetry.Config{Interval: g.interval, GPUs: planGPUs(byHost[a.Nodes[i].Name])}
		a.Nodes[i].Job.Sidecar, _ = json.Marshal(cfg)
	}
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

// Configure hands launch the frames and, on a live terminal, the status
// line, cut to the terminal's width as it is at each redraw.
func (g *gpuWatch) Configure(o *launch.Options) {
	o.Telemetry = g.frame
	if g.ui.Live {
		o.Status = func(c launch.Counts) string { return fitWidth(g.statusLine(c), g.ui.width()) }
		o.StatusOut = g.ui.Err
	}
}

// frame is launch.Options.Telemetry: one frame from a node's agent.
func (g *gpuWatch) frame(node string, attempt int, payload []byte) string {
	var f telemetry.Frame
	if json.Unmarshal(payload, &f) != nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if f.Notice != "" {
		if g.notices.add(node, f.Notice, now) && g.report != nil {
			g.report.Notice(node, f.Notice)
		}
		return g.notices.due(now, false)
	}
	if f.Sample == nil {
		return g.notices.due(now, false)
	}
	g.notices.heard[node] = true
	s := *f.Sample
	s.Node, s.Attempt = node, attempt+1 // as every output numbers attempts: from 1
	if g.jsonl != nil && g.writeErr == nil {
		g.writeErr = g.jsonl.Write(s)
	}
	g.status.Observe(s)
	g.use.Observe(s)
	if g.report != nil {
		g.report.Add(s)
	}
	var msg strings.Builder
	msg.WriteString(g.notices.due(now, false))
	for _, fd := range g.det.Observe(s) {
		if g.report != nil {
			g.report.Finding(fd)
		}
		msg.WriteString(userr.Printable(fd.String()))
		msg.WriteByte('\n')
	}
	return msg.String()
}

// rankUse is what telemetry saw of rank's GPU in attempt (from 1).
func (g *gpuWatch) rankUse(attempt, rank int) (telemetry.Use, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.use.Get(attempt, rank)
}

// statusLine is launch.Options.Status, before fitting.
func (g *gpuWatch) statusLine(c launch.Counts) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status.LineWithSteps(time.Now(), c.Lines, c.Steps)
}

// AttemptFailed puts the failure on the report's time axis.
func (g *gpuWatch) AttemptFailed(k int, f launch.Failure) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.report != nil {
		g.report.Mark(telemetry.Marker{Time: time.Now(), Kind: "failure",
			Label: fmt.Sprintf("attempt %d: %s failed (%s)", k+1, f.Node, f.Reason)})
	}
}

// Finish prints the notices still held, closes the --telemetry file and
// writes the --report file (whole, or not at all: through a temporary
// file renamed over it).
func (g *gpuWatch) Finish(_ context.Context, _ *Attempt, res launch.Result, runErr error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	io.WriteString(g.ui.Err, g.notices.due(time.Now(), true))
	var errs []error
	if g.file != nil {
		err := g.writeErr
		if ferr := g.jsonl.Flush(); err == nil {
			err = ferr
		}
		if cerr := g.file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--telemetry %s: %w", g.file.Name(), err))
		}
	}
	if g.report != nil {
		for _, rs := range res.Restarts {
			// The restart's timeline, on the report's time axis.
			g.report.Mark(telemetry.Marker{Time: rs.Failed, Kind: "restart", Label: strings.TrimPrefix(rs.String(), "gorun: ")})
		}
		addSteps(g.report, res.Steps)
		if err := g.writeReport(res, runErr); err != nil {
			errs = append(errs, fmt.Errorf("--report %s: %w", g.reportPath, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrOutput, joinLines(errs))
	}
	return nil
}

func (g *gpuWatch) writeReport(res launch.Result, runErr error) error {
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
	if err := g.report.WriteHTML(&b, info); err != nil {
		return err
	}
	return writeFileAtomic(g.reportPath, b.Bytes())
}

// addSteps puts every worker's steps on the report's step chart, its
// stragglers (findStragglers) marked.
func addSteps(r *telemetry.Report, attempts []launch.AttemptSteps) {
	slow := map[[2]int]bool{} // attempt (from 1), rank
	for _, s := range findStragglers(attempts, nil) {
		slow[[2]int{s.Attempt, s.Rank}] = true
	}
	for _, a := range attempts {
		for _, rk := range a.Ranks {
			s := telemetry.StepSeries{Node: rk.Node, Rank: rk.Rank, Attempt: a.Attempt + 1, Straggler: slow[[2]int{a.Attempt + 1, rk.Rank}]}
			for _, p := range rk.Series {
				s.T, s.N = append(s.T, p.T), append(s.N, p.N)
			}
			r.AddSteps(s)
		}
	}
}

// planHosts are the plan's nodes, in node-rank order.
func planHosts(p envplan.Plan) []string {
	hosts := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		hosts[i] = n.Host
	}
	return hosts
}

// writeFileAtomic writes data to path through a temporary file beside it,
// so a reader never sees half a file and a failed write leaves the old one.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// fitWidth cuts the status line to one column short of the terminal's
// width: a line that wrapped could not be erased with one carriage return.
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

// notices holds the nodes' telemetry notices ("no GPUs to sample: …") so
// that one notice shared by many nodes is said once, with those nodes, and
// each node's once per run, not once per attempt.
type notices struct {
	nodes   int             // nodes in the current attempt
	heard   map[string]bool // nodes that sent a notice or a sample
	said    map[string]bool // node + notice already held or printed
	pending []pendingNotice // in order of first arrival
	first   time.Time       // when the oldest pending notice came
}

type pendingNotice struct {
	text  string
	nodes []string
}

// add holds node's notice; false when it was said before.
func (n *notices) add(node, text string, now time.Time) bool {
	n.heard[node] = true
	key := node + "\x00" + text
	if n.said[key] {
		return false
	}
	n.said[key] = true
	if len(n.pending) == 0 {
		n.first = now
	}
	for i := range n.pending {
		if n.pending[i].text == text {
			n.pending[i].nodes = append(n.pending[i].nodes, node)
			return true
		}
	}
	n.pending = append(n.pending, pendingNotice{text: text, nodes: []string{node}})
	return true
}

// due returns the held notices as lines, and forgets them, once every
// node has been heard from, noticeWait after the first, or when forced.
func (n *notices) due(now time.Time, force bool) string {
	if len(n.pending) == 0 || !(force || len(n.heard) >= n.nodes || now.Sub(n.first) >= noticeWait) {
		return ""
	}
	var b strings.Builder
	for _, p := range n.pending {
		fmt.Fprintf(&b, "gorun: %s: %s; GPU telemetry is off there\n", nodeList(p.nodes), userr.Printable(p.text))
	}
	n.pending = nil
	return b.String()
}

// nodeList names nodes shortly: one by name, several as a compressed
// host list with their count.
func nodeList(nodes []string) string {
	if len(nodes) == 1 {
		return nodes[0]
	}
	// In name order (node2 before node10), not the order the notices came.
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b string) int {
		pa, na := splitNumber(a)
		pb, nb := splitNumber(b)
		if c := strings.Compare(pa, pb); c != 0 {
			return c
		}
		if c := cmp.Compare(len(na), len(nb)); c != 0 {
			return c
		}
		return strings.Compare(na, nb)
	})
	return fmt.Sprintf("%s (%d nodes)", hosts.Compress(sorted), len(nodes))
}

// splitNumber splits a name's numeric suffix off: "node12" is "node", "12".
func splitNumber(name string) (string, string) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	return name[:i], name[i:]
}

// joinLines joins errors one per line, with no header.
func joinLines(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return fmt.Errorf("%s", strings.Join(s, "; "))
}
