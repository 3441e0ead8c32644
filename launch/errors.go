package launch

import (
	"errors"
	"fmt"
)

// ErrInterrupted is returned, wrapped with how many nodes were stopped, when
// Run's context was cancelled (the user pressed Ctrl-C). Match it with
// errors.Is.
var ErrInterrupted = errors.New("interrupted")

// JobFailed is returned by Run when the group failed and no restart was left.
type JobFailed struct {
	Failure Failure
}

func (e *JobFailed) Error() string {
	f := e.Failure
	return fmt.Sprintf("job failed on %s%s: %s", f.Node, rankWords(f.Rank, f.LocalRank), f.Reason)
}

// ExitCode is the code the process should exit with: the failure's code
// when it is a valid exit status (1..255), else 1.
func (e *JobFailed) ExitCode() int {
	if c := e.Failure.Code; c >= 1 && c <= 255 {
		return c
	}
	return 1
}

// rankWords renders " rank 3 (local rank 1)", or less when a rank is unknown.
func rankWords(rank, localRank int) string {
	switch {
	case rank >= 0 && localRank >= 0:
		return fmt.Sprintf(" rank %d (local rank %d)", rank, localRank)
	case rank >= 0:
		return fmt.Sprintf(" rank %d", rank)
	case localRank >= 0:
		return fmt.Sprintf(" local rank %d", localRank)
	}
	return ""
}
