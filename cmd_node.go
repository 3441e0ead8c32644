package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// nodeCommands are the hidden subcommands the head runs on the nodes.
func nodeCommands(ctx context.Context) []*cli.Command {
	return []*cli.Command{
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
	}
}
