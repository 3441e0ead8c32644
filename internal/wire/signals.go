package wire

import (
	"os"
	"syscall"
)

// StopSignals are the signals that stop a job, as torchrun's
// --signals-to-handle default: each reaches the workers as itself.
func StopSignals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT}
}

// IsStopSignal reports whether sig is one of StopSignals.
func IsStopSignal(sig os.Signal) bool {
	for _, s := range StopSignals() {
		if s == sig {
			return true
		}
	}
	return false
}
