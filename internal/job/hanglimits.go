package job

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/hangtime"
	"github.com/gorun/gorun/internal/inputfile"
	"github.com/gorun/gorun/launch"
)

// hangLimits is the hook that sets the run's hang limits (after start-up,
// and in it) from the command line and what earlier runs of the script
// taught (internal/hangtime), says them in one line when they are not
// simply the default, and keeps what this run teaches.
type hangLimits struct {
	path   string // the record's file; "": nothing is learned (no cache directory)
	rec    hangtime.Record
	limits hangtime.Limits
	auto   bool
	diag   io.Writer
}

func newHangLimits(cl cmdline.CommandLine, plan envplan.Plan, diag io.Writer) *hangLimits {
	world := 0
	for _, n := range plan.Nodes {
		world += len(n.Ranks)
	}
	script := cl.Torchrun.TrainingScript
	content := []byte("\x00" + script) // a module or a command: its name
	if !cl.Torchrun.NoPython && !cl.Torchrun.Module {
		if src, err := inputfile.Read(script, maxScriptBytes); err == nil {
			content = src
		}
	}
	h := &hangLimits{auto: cl.Gorun.HangAuto, diag: diag}
	if cache, err := os.UserCacheDir(); err == nil {
		h.path = hangtime.Path(cache, hangtime.Key(content, world))
	}
	if h.path != "" {
		rec, err := hangtime.Load(h.path)
		if err != nil && h.auto {
			fmt.Fprintf(diag, "gorun: hangs: what earlier runs taught is unreadable, so nothing learned applies: %v\n", err)
		}
		h.rec = rec
	}
	h.rec.Script, h.rec.World = script, world
	h.limits = hangtime.Choose(hangtime.Settings{Timeout: cl.Gorun.HangTimeout, Auto: h.auto,
		Floor: cl.Gorun.HangTimeoutFloor, Default: cmdline.DefaultHangTimeout}, h.rec)
	return h
}

func (*hangLimits) Name() string { return "hang limits" }

func (h *hangLimits) Configure(o *launch.Options) {
	o.HangTimeout, o.StartupTimeout, o.StepTimeout = h.limits.Hang, h.limits.Startup, h.limits.Step
	if h.auto || h.limits.Hang != cmdline.DefaultHangTimeout || h.limits.Startup != h.limits.Hang {
		fmt.Fprintf(h.diag, "gorun: hangs: %s\n", h.limits.Why)
	}
}

// Finish keeps what the run taught: the longest silences of its attempts
// that may teach (hangtime.Teaches).
func (h *hangLimits) Finish(_ context.Context, _ *Attempt, res launch.Result, _ error) error {
	if h.path == "" {
		return nil
	}
	var run hangtime.Run
	taught := false
	for _, s := range res.Silences {
		if hangtime.Teaches(s.StartedUp, s.Succeeded, s.Hung, s.Ran) {
			run.Startup, run.Longest, taught = max(run.Startup, s.Startup), max(run.Longest, s.Longest), true
			run.Step = max(run.Step, s.LongestStep)
		}
	}
	if !taught {
		return nil
	}
	run.When = time.Now().UTC().Truncate(time.Second)
	h.rec.Add(run)
	err := hangtime.Save(h.path, h.rec)
	if h.auto {
		if err != nil {
			fmt.Fprintf(h.diag, "gorun: hangs: could not keep what this run taught: %v\n", err)
		} else {
			fmt.Fprintf(h.diag, "gorun: hangs: learned from this run: the longest silence %v in start-up, %v after it (%s)\n",
				run.Startup.Round(time.Millisecond), run.Longest.Round(time.Millisecond), h.path)
		}
	}
	return nil // a cache that cannot be written fails nothing the user asked for
}
