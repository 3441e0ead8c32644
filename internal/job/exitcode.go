package job

import (
	"errors"
	"syscall"

	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/preflight"
)

// Exit codes: the contract README's "Exit codes" table documents. A
// worker's own code (or 128+N for a worker killed by signal N) passes
// through as torchrun passes it; gorun's own outcomes are these.
const (
	ExitOK          = 0
	ExitFailure     = 1   // gorun itself failed, or an output file could not be written
	ExitUsage       = 2   // bad input, a failed preflight of it included: nothing was started; never worth a retry
	ExitNode        = 3   // a node unreachable or unhealthy (preflight, a recheck, GPU memory kept): retry on other nodes
	ExitHang        = 124 // the last attempt hung (launch.ExitHang)
	ExitInterrupted = 130 // a stop signal of unknown kind; else 128+N for signal N (SIGINT 130, SIGTERM 143)
)

// ExitCode is the one mapping of a run's end to gorun's exit code (main
// prints the error; --summary records the code); stopSig is the stop
// signal gorun got, 0 if none.
func ExitCode(err error, stopSig syscall.Signal) int {
	var input *userr.InputError
	var failed *launch.JobFailed
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &failed):
		return failed.ExitCode() // a hang is launch.ExitHang
	case errors.Is(err, launch.ErrInterrupted):
		if stopSig != 0 {
			return 128 + int(stopSig)
		}
		return ExitInterrupted
	case errors.Is(err, ErrRecheckFailed), errors.Is(err, ErrPreflightFailed), errors.Is(err, ErrUnreachable):
		return ExitNode
	case errors.As(err, &input), errors.Is(err, ErrPreflightInput),
		errors.Is(err, preflight.ErrBadCapture), errors.Is(err, ErrSSHSettings):
		return ExitUsage
	}
	return ExitFailure
}
