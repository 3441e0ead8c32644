// Package cmdline reads gorun's command lines: the launch command line,
// which is torchrun 2.11's (`[gorun options] [torchrun options]
// training_script [script args...]`, read with argparse's rules and the
// PET_<DEST> defaults), and the options of gorun's subcommands, which follow
// the same grammar.
//
// It owns the argparse engine (argparse.go), torchrun's option table and
// the configuration torchrun derives from it (torchrun.go, values.go,
// endpoint.go, pet.go, pylit.go), gorun's own options, one table row each
// (gorunopts.go), the --env policy (envflag.go), and the types the rest of
// gorun plans with: CommandLine, Config (whose JSON is part of
// --format json's contract) and Options. Parse reads a launch line,
// ParseSubcommand the line of `gorun hosts` or `gorun preflight`.
//
// cmdline does no I/O and keeps no state: argv and an environment lookup
// are passed in, and the only randomness, the --standalone rendezvous id,
// can be injected (ParseWith). It never starts, connects to or checks
// anything beyond the text it is given; whether a script or a hostfile
// exists is the caller's question. Nothing blocks, so nothing takes a
// context, and every function is safe for concurrent use.
//
// Input the user can fix is refused with *userr.InputError, whose message
// never prints the value of an --env or what follows '=' in an unknown
// option; -h and --help return ErrHelp.
package cmdline
