package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/schema"
	"github.com/gorun/gorun/internal/secret"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
)

// Summary is what --summary FILE holds once the run ends, whatever its
// end: its outcome, every attempt's failure, and each restart's timeline
// (the same milestones as the "gorun: restart after attempt K" line).
type Summary struct {
	schema.Stamp
	// Command is what followed "gorun", as typed, but for secrets (an
	// --env value whose name marks a credential, a token's shape, a URL's
	// password), hidden as the report hides them (secret.RedactArgs): the
	// file is shared as the report is.
	Command []string  `json:"command"`
	RunID   string    `json:"run_id,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Seconds float64   `json:"seconds"`
	// Outcome is "succeeded", "failed" (no restart left), "interrupted"
	// (a stop from outside), "error" (gorun could not go on: a node
	// failing its recheck, an attempt that could not be prepared) or
	// "refused" (nothing started: a node unreachable, preflight failed).
	Outcome string `json:"outcome"`
	// ExitCode is gorun's exit code (README, "Exit codes"); null only
	// for "interrupted", whose code is the stop signal's.
	ExitCode *int   `json:"exit_code"`
	Error    string `json:"error,omitempty"`
	Attempts int    `json:"attempts"`
	// Nodes and WorldSize are the last attempt's.
	Nodes     []string         `json:"nodes"`
	WorldSize int              `json:"world_size"`
	Failures  []FailureSummary `json:"failures"`
	Restarts  []RestartSummary `json:"restarts"`
	// AttemptNodes are the nodes each attempt ran on, in node-rank order.
	AttemptNodes [][]string `json:"attempt_nodes"`
	// Replacements are the spares that took a node's place (hot spares).
	Replacements []ReplacementSummary `json:"replacements"`
	// NodesAtFault are, for "refused", the nodes whose preflight failed,
	// or that could not be reached.
	NodesAtFault []string `json:"nodes_at_fault"`
	// Goodput is where the wall time went, from gorun's start: null for
	// a refused run.
	Goodput *Goodput `json:"goodput"`
}

// ReplacementSummary is one node replaced by a spare before a restart.
type ReplacementSummary struct {
	Attempt  int    `json:"attempt"` // the first the spare ran, from 1, as printed
	Left     string `json:"left"`
	Spare    string `json:"spare"`
	NodeRank int    `json:"node_rank"`
	Reason   string `json:"reason"`
	// RecheckedMS is when the check that found it, and put the spare in,
	// was over, from the failure (the restart's "nodes rechecked").
	RecheckedMS int64 `json:"rechecked_ms"`
	// FirstLineMS is when the first worker of the attempt on the spare
	// printed its first line, from the failure: what the replacement cost
	// (0: no line came).
	FirstLineMS int64 `json:"first_line_ms"`
}

// FailureSummary is one failed attempt's root cause.
type FailureSummary struct {
	Attempt   int    `json:"attempt"` // from 1, as printed
	Node      string `json:"node"`
	Rank      int    `json:"rank"`       // -1: unknown
	LocalRank int    `json:"local_rank"` // -1: unknown
	Code      int    `json:"code"`       // the worker's, or -1 for a lost node
	Signal    int    `json:"signal,omitempty"`
	Phase     string `json:"phase"` // a launch.Phase: where the worker was
	Reason    string `json:"reason"`
}

// RestartSummary is one restart's timeline: each milestone in
// milliseconds from the moment the failure was seen.
type RestartSummary struct {
	AfterAttempt int       `json:"after_attempt"` // from 1, as printed
	FailureSeen  time.Time `json:"failure_seen"`
	// Milestones are written as "phases", the name the format has
	// always had.
	Milestones []MilestoneSummary `json:"phases"`
	Longest    string             `json:"longest,omitempty"`
	LongestMS  int64              `json:"longest_ms,omitempty"`
	WarmNodes  int                `json:"warm_nodes"`
	Nodes      int                `json:"nodes"`
	// AheadNodes were handed the next attempt's job ahead of the stop;
	// AheadReleased of them had it released (the others' jobs changed
	// with the checks, and were stopped unused). Both 0 without it.
	AheadNodes    int `json:"ahead_nodes"`
	AheadReleased int `json:"ahead_released"`
	// PooledWorkers of Workers came from their node's worker pool
	// (--prewarm); both 0 without one.
	PooledWorkers int    `json:"pooled_workers"`
	Workers       int    `json:"workers"`
	Line          string `json:"line"` // as printed
}

// MilestoneSummary is one milestone of a restart (launch.Milestone).
type MilestoneSummary struct {
	Key  string `json:"key"`  // stable: stopped, gpu_memory_free, nodes_rechecked, next_torchrun_handed, workers_released, workers_started, first_line
	Name string `json:"name"` // as printed
	AtMS int64  `json:"at_ms"`
}

// summary is the hook that writes --summary FILE as the run ends.
type summary struct {
	stamp   schema.Stamp
	path    string
	command []string
	runID   string
	start   time.Time
	// goodput is what the goodput hook worked out before this one
	// finishes; nil: none (--step-pattern off).
	goodput *goodputResult

	mu       sync.Mutex
	failures []FailureSummary
	attempts [][]string    // each attempt's nodes (Starting)
	replaced []replacement // every attempt's (Starting)
}

// Starting records the nodes attempt a.K runs on.
func (s *summary) Starting(a *Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts[:min(a.K, len(s.attempts))], planHosts(a.Plan))
	s.replaced = append(s.replaced, a.Replaced...)
}

func (*summary) Name() string { return "summary" }

func (s *summary) AttemptFailed(k int, f launch.Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, FailureSummary{Attempt: k + 1, Node: f.Node, Rank: f.Rank, LocalRank: f.LocalRank,
		Code: f.Code, Signal: f.Signal, Phase: string(f.Phase), Reason: secret.Redact("", userr.Printable(f.Reason))})
}

func (s *summary) Finish(_ context.Context, a *Attempt, res launch.Result, runErr error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := time.Now()
	sum := Summary{NodesAtFault: []string{}, Stamp: s.stamp, Command: secret.RedactArgs(s.command), RunID: s.runID, Start: s.start, End: end, Seconds: end.Sub(s.start).Seconds(),
		Attempts: res.Attempts, Nodes: []string{}, Failures: s.failures, Restarts: []RestartSummary{},
		AttemptNodes: append([][]string{}, s.attempts...), Replacements: []ReplacementSummary{}}
	for _, r := range s.replaced {
		rs := ReplacementSummary{Attempt: r.attempt + 1, Left: r.left, Spare: r.spare, NodeRank: r.rank, Reason: secret.Redact("", userr.Printable(r.why))}
		for _, rt := range res.Restarts {
			if rt.Attempt+1 == r.attempt {
				rs.RecheckedMS, rs.FirstLineMS = rt.Checked.Milliseconds(), rt.FirstLine.Milliseconds()
			}
		}
		sum.Replacements = append(sum.Replacements, rs)
	}
	if sum.Failures == nil {
		sum.Failures = []FailureSummary{}
	}
	for _, n := range a.Plan.Nodes {
		sum.Nodes = append(sum.Nodes, n.Host)
		sum.WorldSize += len(n.Ranks)
	}
	var failed *launch.JobFailed
	switch {
	case runErr == nil:
		sum.Outcome, sum.ExitCode = "succeeded", new(int)
	case errors.As(runErr, &failed):
		code := failed.ExitCode()
		sum.Outcome, sum.ExitCode = "failed", &code
	case errors.Is(runErr, launch.ErrInterrupted):
		sum.Outcome = "interrupted"
	default:
		code := ExitCode(runErr, 0)
		sum.Outcome, sum.ExitCode = "error", &code
	}
	if runErr != nil {
		sum.Error = secret.Redact("", userr.Printable(runErr.Error()))
	}
	if s.goodput != nil && s.goodput.done {
		g := s.goodput.g
		g.Chain = s.goodput.chain
		sum.Goodput = &g
	}
	for _, r := range res.Restarts {
		rs := RestartSummary{AfterAttempt: r.Attempt + 1, FailureSeen: r.Failed, Milestones: []MilestoneSummary{},
			WarmNodes: r.Warm, Nodes: r.Nodes, AheadNodes: r.Ahead, AheadReleased: r.AheadUsed, PooledWorkers: r.Pooled, Workers: r.Workers, Line: r.String()}
		for _, m := range r.Milestones() {
			rs.Milestones = append(rs.Milestones, MilestoneSummary{Key: m.Key, Name: m.Name, AtMS: m.At.Milliseconds()})
		}
		if name, d := r.Longest(); name != "" {
			rs.Longest, rs.LongestMS = name, d.Milliseconds()
		}
		sum.Restarts = append(sum.Restarts, rs)
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: --summary %s: %w", ErrOutput, s.path, err)
	}
	if err := writeFileAtomic(s.path, append(b, '\n')); err != nil {
		return fmt.Errorf("%w: --summary %s: %w", ErrOutput, s.path, err)
	}
	return nil
}

// writeRefused writes --summary for a run refused before anything
// started, whose summary hook never ran: a node unreachable, ssh settings
// that fail every connection, preflight failed. Other errors before the
// start are bad input, the summary path itself perhaps.
func writeRefused(cfg Config, start time.Time, runErr error, atFault []string) error {
	path := cfg.CommandLine.Gorun.Summary
	if path == "" || !(errors.Is(runErr, ErrPreflightFailed) || errors.Is(runErr, ErrPreflightInput) ||
		errors.Is(runErr, ErrUnreachable) || errors.Is(runErr, ErrSSHSettings)) {
		return nil
	}
	end := time.Now()
	code := ExitCode(runErr, 0)
	sum := Summary{Stamp: schema.NewStamp(schema.Summary, cfg.Getenv), Command: secret.RedactArgs(cfg.Args), RunID: cfg.RunID,
		Start: start, End: end, Seconds: end.Sub(start).Seconds(), Outcome: "refused", ExitCode: &code,
		Error: secret.Redact("", userr.Printable(runErr.Error())), Nodes: []string{}, Failures: []FailureSummary{},
		Restarts: []RestartSummary{}, AttemptNodes: [][]string{}, Replacements: []ReplacementSummary{}, NodesAtFault: append([]string{}, atFault...)}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err == nil {
		err = writeFileAtomic(path, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("--summary %s: %w", path, err)
	}
	return nil
}
