package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/internal/node"
	"github.com/gorun/gorun/internal/rank"
	"github.com/gorun/gorun/internal/wire"
)

// nodeCommands are the hidden subcommands the head runs on a node (gorun
// itself, uploaded or preinstalled there): each is one call into the
// node-side packages, internal/node and internal/rank.
func nodeCommands(ctx context.Context) []*cli.Command {
	return []*cli.Command{
		{
			// The node agent: started by the head (locally or over SSH) to
			// run one job and tear its whole tree down.
			Name: wire.AgentCommand, Hidden: true, SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				return cli.Exit("", node.ServeAgent(ctx, os.Stdin, os.Stdout, os.Stderr))
			},
		},
		{
			// The worker's supervisor: torchrun starts it in place of
			// each worker (see envplan's wrapWorkers and rank.Run).
			Name: wire.RankCommand, Hidden: true, SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				return cli.Exit("", rank.Run(c.Args().Slice(), os.Getenv, os.Stderr))
			},
		},
		{
			// A node's side of the all_reduce between two nodes
			// (preflight --bandwidth all).
			Name: wire.BandwidthCommand, Hidden: true, SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				return node.RunBandwidth(ctx, c.Args().First(), c.App.Writer)
			},
		},
		{
			// The teardown check before a restart: kills what is left of
			// the job on this node's GPUs, waits for their memory, and
			// prints what it found as JSON.
			Name: wire.GPUFreeCommand, Hidden: true, SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				return node.RunGPUFree(ctx, c.Args().First(), os.Stdin, c.App.Writer)
			},
		},
		{
			// The node-side collector: prints this node's Facts as JSON.
			Name: wire.CollectCommand, Hidden: true, SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				return node.RunCollect(ctx, c.Args().First(), c.App.Writer)
			},
		},
	}
}
