package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/signals"
	"github.com/gorun/gorun/internal/term"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/internal/wire"
)

// runLaunch is the main job: argv → job.Config, then job.Run.
func runLaunch(w *signals.Watcher, args []string, stdout, stderr io.Writer) error {
	cl, notes, err := job.ParseLaunch(w.Context(), args, os.Getenv, exec.LookPath)
	lines := stderr // the nodes' lines: never stamped by gorun's --timestamps
	if s, ok := stderr.(*term.Stamper); ok {
		lines = s.W
		if cl.Gorun.Timestamps {
			s.Enable()
		}
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, "gorun:", n)
	}
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
	var note string
	if cfg.CommandLine, note = job.TorchrunBesideSelf(cfg.CommandLine, cfg.Self, os.Getenv, exec.LookPath); note != "" {
		fmt.Fprintln(stderr, "gorun:", note)
	}
	w.Pass(cl.Torchrun.PassSignals()...)
	ui := jobUI(stdout, lines, w.Kill())
	if cl.Gorun.Timestamps {
		// Every line of gorun's stamped: no line redrawn in place, the
		// progress of long phases as lines (job.UI.Live).
		ui.Err, ui.Live = stderr, false
	}
	ui.Signals = w.Passed()
	ui.Stdin = sync.OnceValues(func() (*os.File, error) { return workerStdin(os.Stdin) })
	if ui.TTY.Out || ui.TTY.Err {
		ui.Resize = resizes(stdout, stderr)
	}
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
		// Deleted under the shell (a rebuilt checkout): the workers start
		// in it on every node, so nothing can start.
		return job.Config{}, &userr.InputError{Where: "the working directory",
			Problem: fmt.Sprintf("it cannot be read (%v); it may have been deleted or replaced since this shell entered it", err),
			Fix:     "cd to the directory again (cd \"$PWD\"), or to another one, and run the command again"}
	}
	return job.Config{Args: args, CommandLine: cl, Getenv: os.Getenv, Environ: environ(),
		Self: self, Dir: dir, LookPath: exec.LookPath}, nil
}

// jobUI says what the output streams are.
func jobUI(stdout, stderr io.Writer, kill <-chan struct{}) job.UI {
	ui := job.UI{Out: stdout, Err: stderr, Kill: kill, Merged: term.SameFile(stdout, stderr),
		Color: term.Color(stdout, os.Getenv),
		Live:  term.Live(stderr, os.Getenv),
		Width: func() int { return term.Width(stderr) },
		TTY:   wire.TTY{Out: term.IsTerminal(stdout), Err: term.IsTerminal(stderr)},
	}
	for _, w := range []io.Writer{stdout, stderr} {
		if c, r := term.Size(w); c > 0 {
			ui.TTY.Cols, ui.TTY.Rows = c, r
			break
		}
	}
	return ui
}

// workerStdin is what local rank 0's worker reads as stdin, as under
// torchrun: gorun's own, passed as it is; where it is a terminal, a pipe
// fed from it, since a worker, in a process group of its own, would be
// stopped (SIGTTIN) by a read of the terminal. gorun then ignores
// SIGTTIN, so that in the background its read fails instead of stopping
// it, and tries again until it is in the foreground; the terminal keeps
// its line editing and echo, and a Ctrl-D ends the workers' stdin.
func workerStdin(in *os.File) (*os.File, error) {
	if _, err := in.Stat(); err != nil {
		return nil, nil // closed (gorun <&-): the workers read /dev/null
	}
	if !term.IsTerminal(in) {
		return in, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	signal.Ignore(syscall.SIGTTIN)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if _, err := pw.Write(buf[:n]); err != nil {
					return
				}
			}
			switch {
			case err == io.EOF:
				pw.Close()
				return
			case err != nil: // EIO: in the background
				time.Sleep(stdinRetry)
			}
		}
	}()
	return pr, nil
}

// resizes carries the terminal's size each time it changes (SIGWINCH):
// the latest only, when the reader is behind.
func resizes(stdout, stderr io.Writer) <-chan wire.TTY {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	sizes := make(chan wire.TTY, 1)
	go func() {
		for range winch {
			var t wire.TTY
			for _, w := range []io.Writer{stdout, stderr} {
				if t.Cols, t.Rows = term.Size(w); t.Cols > 0 {
					break
				}
			}
			select {
			case <-sizes: // an older size nobody took
			default:
			}
			sizes <- t
		}
	}()
	return sizes
}

// stdinRetry is how often a gorun in the background tries its terminal
// again for the workers' stdin.
const stdinRetry = 250 * time.Millisecond

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
