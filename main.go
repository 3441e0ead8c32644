// Command gorun is a drop-in replacement for torchrun: the same command line,
// plus launch from one head node over SSH, preflight checks on every node, an
// environment plan with a reason for every variable, and whole-group
// supervision that leaves no process behind.
//
// main.go is the composition root: it parses the command line, creates every
// side effect (signal context, NVML, SSH clients, stdout) and maps errors to
// exit codes in one place (exitCode). The packages do the work; each
// subcommand's wiring is in a file of its own (cmd_launch.go,
// cmd_preflight.go, cmd_hosts.go); the help texts are in usage.go.
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
	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// Exit codes, as a user of torchrun expects them plus gorun's own.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2 // bad input, or preflight found a failure; nothing started
	exitInterrupted = 130
)

// errPreflightFailed means preflight found a failure and nothing was started.
var errPreflightFailed = errors.New("preflight failed; nothing was started")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newApp(ctx).Run(os.Args)
	stop()
	os.Exit(exitCode(err))
}

// exitCode is the one place errors become exit codes.
func exitCode(err error) int {
	var input *userr.InputError
	var failed *launch.JobFailed
	var exit cli.ExitCoder
	switch {
	case err == nil, errors.Is(err, cmdline.ErrHelp):
		return exitOK
	case errors.As(err, &failed):
		return failed.ExitCode() // launch has printed the failure summary
	case errors.Is(err, launch.ErrInterrupted):
		fmt.Fprintln(os.Stderr, "gorun:", userr.Printable(err.Error()))
		return exitInterrupted
	case errors.As(err, &exit) && !errors.As(err, new(*exec.ExitError)):
		// cli.Exit from the hidden subcommands; a command gorun ran that
		// failed has an exit code too, but it is not gorun's.
		return exit.ExitCode()
	case errors.As(err, &input), errors.Is(err, errPreflightFailed),
		errors.Is(err, preflight.ErrBadCapture), errors.Is(err, errUnreachable),
		errors.Is(err, errSSHSettings):
		fmt.Fprintln(os.Stderr, "gorun:", userr.Printable(err.Error()))
		return exitUsage
	default:
		fmt.Fprintln(os.Stderr, "gorun:", userr.Printable(err.Error()))
		return exitFailure
	}
}

func newApp(ctx context.Context) *cli.App {
	return &cli.App{
		Name:      "gorun",
		Usage:     "torchrun, launched from one head node, checked first, supervised as one group",
		UsageText: "gorun [gorun options] [torchrun options] training_script [script args...]\n   gorun preflight [options] [script]\n   gorun hosts [--hosts|--hostfile|Slurm] [--json]",
		// The launch command line follows torchrun's argparse rules, which
		// urfave/cli's flag parser does not; cmdline parses it.
		SkipFlagParsing: true,
		HideHelp:        true,
		HideVersion:     true,
		// exitCode alone prints errors and picks the exit code; urfave/cli
		// would print an ExitCoder's message again and exit on its own.
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			return runLaunch(ctx, c.Args().Slice(), c.App.Writer, c.App.ErrWriter)
		},
		Commands: []*cli.Command{
			{
				Name:            "preflight",
				Usage:           "check every node (driver, GPUs, links, versions) and print a report",
				UsageText:       "gorun preflight [--json] [--topo-file FILE] [gorun options] [torchrun options] [script]",
				SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return runPreflight(ctx, c.Args().Slice(), c.App.Writer, c.App.ErrWriter)
				},
			},
			{
				Name:  "help",
				Usage: "print this help",
				Action: func(c *cli.Context) error {
					text := usage()
					if c.Args().First() == "preflight" {
						text = preflightUsage
					}
					_, err := io.WriteString(c.App.Writer, text)
					return err
				},
			},
			{
				Name:         "hosts",
				Usage:        "print the resolved host list in launch order",
				OnUsageError: usageError("gorun hosts", "gorun hosts [--hosts LIST | --hostfile FILE] [--include|--exclude SPEC] [--json]"),
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "hosts", Usage: "h1:8,h2:8"},
					&cli.StringFlag{Name: "hostfile", Usage: "DeepSpeed or MPI hostfile"},
					&cli.StringFlag{Name: "include", Usage: "DeepSpeed include filter (host1:0,2@host2)"},
					&cli.StringFlag{Name: "exclude", Usage: "DeepSpeed exclude filter"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return noArguments("gorun hosts", c.Args().First())
					}
					opts := cmdline.Options{Hosts: c.String("hosts"), Hostfile: c.String("hostfile"),
						Include: c.String("include"), Exclude: c.String("exclude")}
					return runHosts(opts, c.Bool("json"), c.App.Writer)
				},
			},
			{
				Name:         "version",
				Usage:        "print gorun's version",
				OnUsageError: usageError("gorun version", "gorun version takes no options"),
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return noArguments("gorun version", c.Args().First())
					}
					_, err := fmt.Fprintln(c.App.Writer, "gorun", version())
					return err
				},
			},
			{
				// The node agent: started by the head (locally or over SSH) to
				// run one job and tear its whole tree down.
				Name: "_agent", Hidden: true, SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return cli.Exit("", sshexec.ServeAgentWith(ctx, gpuSidecar, os.Stdin, os.Stdout, os.Stderr))
				},
			},
			{
				// The worker's supervisor: torchrun starts it in place of
				// each worker (see envplan's wrapWorkers and launch.RunWorker).
				Name: envplan.RankCommand, Hidden: true, SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return cli.Exit("", launch.RunWorker(c.Args().Slice(), os.Getenv, os.Stderr))
				},
			},
			{
				// A node's side of the all_reduce between two nodes
				// (preflight --bandwidth all).
				Name: preflight.BandwidthCommand, Hidden: true, SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return bandwidthPair(ctx, c.Args().First(), c.App.Writer)
				},
			},
			{
				// The node-side collector: prints this node's Facts as JSON.
				Name: preflight.CollectCommand, Hidden: true, SkipFlagParsing: true,
				Action: func(c *cli.Context) error {
					return collectRequest(ctx, c.Args().First(), c.App.Writer)
				},
			},
		},
	}
}

// interrupted turns err into an interruption when the user's signal is
// what ended the step (an interruption exits 130, not 2), and returns err
// as it is otherwise.
func interrupted(ctx context.Context, when string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w %s", launch.ErrInterrupted, when)
}
