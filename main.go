// Command gorun is a drop-in replacement for torchrun: the same command line,
// plus launch from one head node over SSH, preflight checks on every node, an
// environment plan with a reason for every variable, and whole-group
// supervision that leaves no process behind.
//
// main.go is the composition root: it parses the command line, creates the
// process-wide side effects (the signal context, the environment, the
// executable's path, stdout and stderr) and maps errors to exit codes in
// one place (exitCode). The run itself is internal/job's; each
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
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/job"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
)

// Exit codes: the contract README's "Exit codes" table documents. A
// worker's own code (or 128+N for a worker killed by signal N) passes
// through as torchrun passes it; gorun's own outcomes are these.
const (
	exitOK          = 0
	exitFailure     = 1   // gorun itself failed, or an output file could not be written
	exitUsage       = 2   // bad input, unreachable nodes or a failed preflight: nothing was started
	exitRecheck     = 3   // a node failed its checks before a restart; attempts had run
	exitHang        = 124 // the last attempt hung (launch.ExitHang)
	exitInterrupted = 130 // SIGINT or SIGTERM
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newApp(ctx, secondSignal(ctx)).Run(os.Args)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// secondSignal is closed by a second SIGINT or SIGTERM after ctx ended
// (the first): the graceful stop becomes an immediate one.
func secondSignal(ctx context.Context) <-chan struct{} {
	kill := make(chan struct{})
	go func() {
		<-ctx.Done()
		second := make(chan os.Signal, 1)
		signal.Notify(second, os.Interrupt, syscall.SIGTERM)
		<-second
		close(kill)
	}()
	return kill
}

// exitCode is the one place errors become exit codes.
func exitCode(err error, stderr io.Writer) int {
	var input *userr.InputError
	var failed *launch.JobFailed
	var exit cli.ExitCoder
	switch {
	case err == nil, errors.Is(err, cmdline.ErrHelp):
		return exitOK
	case errors.As(err, &failed):
		return failed.ExitCode() // launch has printed the failure summary; a hang is launch.ExitHang
	case errors.Is(err, launch.ErrInterrupted):
		printErr(stderr, err)
		return exitInterrupted
	case errors.As(err, &exit) && !errors.As(err, new(*exec.ExitError)):
		// cli.Exit from the hidden subcommands; a command gorun ran that
		// failed has an exit code too, but it is not gorun's.
		return exit.ExitCode()
	case errors.Is(err, job.ErrRecheckFailed):
		printErr(stderr, err)
		return exitRecheck
	case errors.As(err, &input), errors.Is(err, job.ErrPreflightFailed),
		errors.Is(err, preflight.ErrBadCapture), errors.Is(err, job.ErrUnreachable),
		errors.Is(err, job.ErrSSHSettings):
		printErr(stderr, err)
		return exitUsage
	default:
		printErr(stderr, err)
		return exitFailure
	}
}

func printErr(w io.Writer, err error) {
	fmt.Fprintln(w, "gorun:", userr.Printable(err.Error()))
}

func newApp(ctx context.Context, kill <-chan struct{}) *cli.App {
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
			return runLaunch(ctx, kill, c.Args().Slice(), c.App.Writer, c.App.ErrWriter)
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
		}, nodeCommands(ctx)...),
	}
}
