package rank

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// forwardedSignals are the signals passed on to the worker. SIGKILL cannot
// be caught; the worker's parent-death signal covers it.
func forwardedSignals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGWINCH, syscall.SIGCONT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGABRT, syscall.SIGXCPU}
}

// isStopSignal reports signals that mean "stop": the worker's end after one of
// them is a consequence.
func isStopSignal(s os.Signal) bool {
	switch s {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

func (w *worker) forwardSignals(ctx context.Context, sigs <-chan os.Signal, pid int) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			if isStopSignal(s) {
				w.markStopped()
			}
			// To the worker's process group, as torchrun's killpg would
			// reach it and the children it started without gorun.
			_ = unix.Kill(-pid, s.(syscall.Signal))
		}
	}
}

// exitBySignal ends this process by sig, as the worker ended. The Go
// runtime's own handling would print a goroutine dump for SIGABRT, SIGQUIT
// and the faults, so the default action is restored with rt_sigaction
// itself. No core file: the worker's own is the one that matters.
func exitBySignal(sig syscall.Signal) {
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	signal.Reset(sig)
	var dfl sigaction // SIG_DFL, no flags, empty mask
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
	time.Sleep(100 * time.Millisecond) // the signal is being delivered
	os.Exit(128 + int(sig))
}

// sigaction is the kernel's struct sigaction on Linux (amd64 and arm64).
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}
