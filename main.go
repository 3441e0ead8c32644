// Command gorun is a drop-in replacement for torchrun: the same command line,
// plus launch from one head node over SSH, preflight checks on every node, an
// environment plan with a reason for every variable, and whole-group
// supervision that leaves no process behind.
//
// main.go is the composition root: it parses the command line, creates the
// process-wide side effects (the signal context, the environment, the
// executable's path, stdout and stderr) and prints the error a run ends
// with (exitCode; the mapping to exit codes is job.ExitCode, which
// --summary records too). The run itself is internal/job's; each
// subcommand's wiring is in a file of its own (cmd_launch.go,
// cmd_preflight.go, cmd_hosts.go, cmd_node.go); the help texts are in
// usage.go.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/signals"
	"github.com/gorun/gorun/internal/term"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
)

// Exit codes: internal/job's (job.ExitCode maps every end of a run).
const (
	exitOK          = job.ExitOK
	exitFailure     = job.ExitFailure
	exitUsage       = job.ExitUsage
	exitNode        = job.ExitNode
	exitHang        = job.ExitHang
	exitInterrupted = job.ExitInterrupted
)

func main() {
	// The hidden subcommands (a node's agent, a worker's supervisor) hear
	// their signals themselves.
	var w *signals.Watcher
	if len(os.Args) < 2 || !strings.HasPrefix(os.Args[1], "_") {
		w = signals.Watch()
	}
	// gorun's own stderr: --timestamps turns its stamps on (runLaunch).
	stderr := &term.Stamper{W: os.Stderr}
	app := newApp(w)
	app.ErrWriter = stderr
	err := app.Run(os.Args)
	os.Exit(exitCode(err, stderr, w.First()))
}

// exitCode is where errors become exit codes (job.ExitCode), printed
// once; stopSig is the stop signal gorun got, 0 if none.
func exitCode(err error, stderr io.Writer, stopSig syscall.Signal) int {
	var failed *launch.JobFailed
	var exit cli.ExitCoder
	switch {
	case err == nil, errors.Is(err, cmdline.ErrHelp):
		return exitOK
	case errors.As(err, &failed):
		return failed.ExitCode() // launch has printed the failure summary; a hang is launch.ExitHang
	case errors.As(err, &exit) && !errors.As(err, new(*exec.ExitError)) && !errors.Is(err, launch.ErrInterrupted):
		// cli.Exit from the hidden subcommands; a command gorun ran that
		// failed has an exit code too, but it is not gorun's.
		return exit.ExitCode()
	}
	printErr(stderr, err)
	return job.ExitCode(err, stopSig)
}

func printErr(w io.Writer, err error) {
	fmt.Fprintln(w, "gorun:", userr.Printable(err.Error()))
}

func newApp(w *signals.Watcher) *cli.App {
	ctx := w.Context()
	return &cli.App{
		Name:  "gorun",
		Usage: "torchrun, launched from one head node, checked first, supervised as one group",
		// Every command line follows gorun's own grammar (torchrun's
		// argparse rules, which urfave/cli's flag parser does not follow),
		// so urfave/cli only dispatches.
		SkipFlagParsing: true,
		HideHelp:        true,
		HideVersion:     true,
		// exitCode alone prints errors and picks the exit code; urfave/cli
		// would print an ExitCoder's message again and exit on its own.
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			// `gorun help` is read here, not as a urfave/cli command, which
			// would answer `gorun help help` with its own template.
			if args := c.Args().Slice(); len(args) > 0 && args[0] == "help" {
				return runHelp(args[1:], c.App.Writer)
			}
			if args := c.Args().Slice(); len(args) == 1 && args[0] == "--version" {
				return runVersion(nil, c.App.Writer) // torchrun has no --version: gorun's
			}
			return runLaunch(w, c.Args().Slice(), c.App.Writer, c.App.ErrWriter)
		},
		Commands: append([]*cli.Command{
			{
				Name: "preflight", SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return runPreflight(ctx, c.Args().Slice(), c.App.Writer, c.App.ErrWriter)
				},
			},
			{
				Name: "hosts", SkipFlagParsing: true,
				Action: func(c *cli.Context) error { return runHosts(c.Args().Slice(), c.App.Writer) },
			},
			{
				Name: "version", SkipFlagParsing: true,
				Action: func(c *cli.Context) error { return runVersion(c.Args().Slice(), c.App.Writer) },
			},
		}, nodeCommands(context.Background())...),
	}
}
