package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/signals"
	"github.com/gorun/gorun/internal/term"
)

// runLaunch is the main job: argv → job.Config, then job.Run.
func runLaunch(w *signals.Watcher, args []string, stdout, stderr io.Writer) error {
	cl, err := cmdline.Parse(args, os.Getenv)
	if errors.Is(err, cmdline.ErrHelp) {
		_, err = io.WriteString(stdout, usage())
		return err
	}
	if err != nil {
		return err
	}
	cfg, err := jobConfig(args, cl)
	if err != nil {
		return err
	}
	w.Pass(cl.Torchrun.PassSignals()...)
	ui := jobUI(stdout, stderr, w.Kill())
	ui.Signals = w.Passed()
	return job.Run(w.Context(), cfg, ui)
}

// jobConfig gathers what a run reads of this process.
func jobConfig(args []string, cl cmdline.CommandLine) (job.Config, error) {
	self, err := os.Executable()
	if err != nil {
		return job.Config{}, fmt.Errorf("locate the gorun binary: %w", err)
	}
	dir, err := os.Getwd()
	if err != nil {
		return job.Config{}, fmt.Errorf("read the working directory: %w", err)
	}
	return job.Config{Args: args, CommandLine: cl, Getenv: os.Getenv, Environ: environ(),
		Self: self, Dir: dir, LookPath: exec.LookPath}, nil
}

// jobUI says what the output streams are.
func jobUI(stdout, stderr io.Writer, kill <-chan struct{}) job.UI {
	return job.UI{Out: stdout, Err: stderr, Kill: kill, Merged: term.SameFile(stdout, stderr),
		Color: term.Color(stdout, os.Getenv),
		Live:  term.Live(stderr, os.Getenv),
		Width: func() int { return term.Width(stderr) },
	}
}

// environ returns the process environment as a map.
func environ() map[string]string {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
