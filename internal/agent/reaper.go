package agent

import (
	"errors"

	"golang.org/x/sys/unix"
)

// reaper waits for every child of the agent. Because the agent is a child
// subreaper, every descendant ends up its child once its parent is gone, so
// "no child left" means the whole tree is gone.
type reaper struct {
	main     int
	mainDone chan struct{} // closed when the job's main process is reaped
	allGone  chan struct{} // closed when the agent has no child left
	status   unix.WaitStatus
	reaped   bool
	others   func(pid int, ws unix.WaitStatus) // told of every other child reaped; nil: none
}

func newReaper(main int) *reaper {
	return &reaper{main: main, mainDone: make(chan struct{}), allGone: make(chan struct{})}
}

func (r *reaper) run() {
	defer close(r.allGone)
	for {
		var ws unix.WaitStatus
		// __WALL: also children that report with a signal other than SIGCHLD.
		pid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			if !r.reaped {
				close(r.mainDone)
			}
			return // ECHILD
		}
		switch {
		case pid == r.main:
			r.status, r.reaped = ws, true
			close(r.mainDone)
		case r.others != nil:
			r.others(pid, ws)
		}
	}
}

// exitCode is the job's exit code; valid once allGone is closed.
func (r *reaper) exitCode() int {
	switch {
	case !r.reaped:
		return ExitBadSpec
	case r.status.Exited():
		return r.status.ExitStatus()
	case r.status.Signaled():
		return 128 + int(r.status.Signal())
	default:
		return 255
	}
}
