package rank

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/sys/unix"
)

// forwardedSignals are the signals this supervisor catches. SIGKILL
// cannot be caught; the worker's parent-death signal covers it.
func forwardedSignals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGXCPU, syscall.SIGPWR,
		syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGABRT}
}

// isStopSignal reports signals that mean "stop": the worker's end after one of
// them is a consequence.
func isStopSignal(s os.Signal) bool { return wire.IsStopSignal(s) }

// isPassSignal reports the signals gorun passes on to the workers without
// stopping anything (USR1, USR2 and those --signals-to-handle may add).
// Nothing but a signal sent to every process of the job at once (Slurm
// signalling a step) makes one reach this supervisor itself: torchrun
// ignores them and never passes them on.
func isPassSignal(s os.Signal) bool {
	switch s {
	case syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGXCPU, syscall.SIGPWR:
		return true
	}
	return false
}

// What a signal decision hears of, for one signal.
const (
	heardOwn = 1 << iota // the signal reached this supervisor itself
	heardHad             // gorun got it from outside, the agent or the head (wire.RelayHad)
	heardAsk             // the head asks for it (wire.RelayStop, RelaySignal)
)

// Timing of signal decisions.
const (
	// decideAfter is how long the gate gathers what it hears of a signal
	// before deciding: a signal sent to every process of the job reaches
	// this supervisor, the worker and the agent within microseconds, and
	// the agent's word of it follows within this.
	decideAfter = 100 * time.Millisecond
	// passQuiet is how long after a decision on a passed signal more of the
	// same signal counts as the same event (the head's copy of one the
	// whole job had already).
	passQuiet = time.Second
)

// signalGate makes each signal reach the worker once, whichever ways it
// comes: by the head (through the agent), by torchrun (which sends its
// stop signal to this supervisor's process group when it stops its
// workers itself), or to every process of the job at once, the worker
// included, as Slurm signals a step. What it hears of a signal within
// decideAfter is one event, decided then:
//
//   - the worker already has its own copy when the signal reached this
//     supervisor and, for a stop signal, gorun too: the agent, or the head,
//     which says so (a stop signal reaching this supervisor alone is
//     torchrun's); then nothing is sent;
//   - otherwise the worker's process group gets the signal, once; a
//     stop the head asks for before anything else is heard of it goes at
//     once, without waiting decideAfter.
//
// A stop signal is decided once for the worker's life: every later copy is
// the same stop. A passed signal may come again once passQuiet is over.
type signalGate struct {
	mu      sync.Mutex
	after   func(time.Duration, func()) // time.AfterFunc, in tests a fake
	now     func() time.Time
	deliver func(sig syscall.Signal)
	stopped func() // told of every stop signal heard
	state   map[syscall.Signal]*gateState
}

type gateState struct {
	heard   int       // what the open event heard; 0 when none is open
	decided time.Time // the last decision
	done    bool      // a stop signal, decided
}

func newSignalGate(deliver func(syscall.Signal), stopped func()) *signalGate {
	return &signalGate{
		after:   func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		now:     time.Now,
		deliver: deliver,
		stopped: stopped,
		state:   map[syscall.Signal]*gateState{},
	}
}

// hear records one way sig came (heardOwn, heardHad or heardAsk).
func (g *signalGate) hear(sig syscall.Signal, how int) {
	stop := isStopSignal(sig)
	if stop {
		g.stopped()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state[sig]
	if st == nil {
		st = &gateState{}
		g.state[sig] = st
	}
	switch {
	case st.done:
		return
	case st.heard != 0:
		st.heard |= how
		return
	case !stop && !st.decided.IsZero() && g.now().Sub(st.decided) < passQuiet:
		return
	}
	st.heard = how
	if stop && how == heardAsk {
		// The head's stop heard first: a stop sent to the whole step
		// would have reached this supervisor before the head's word of
		// it, so the worker has no copy. At once: a restart waits for it.
		st.heard, st.decided, st.done = 0, g.now(), true
		g.deliver(sig)
		return
	}
	g.after(decideAfter, func() { g.decide(sig) })
}

func (g *signalGate) decide(sig syscall.Signal) {
	g.mu.Lock()
	st := g.state[sig]
	heard := st.heard
	st.heard, st.decided = 0, g.now()
	stop := isStopSignal(sig)
	st.done = stop
	g.mu.Unlock()
	own := heard&heardOwn != 0
	hasCopy := own && (!stop || heard&heardHad != 0)
	if !hasCopy {
		g.deliver(sig)
	}
}

// forwardSignals passes the signals this supervisor gets on to the
// worker's process group, as torchrun's killpg would reach it and the
// children it started: stop and passed signals through the gate, the rest
// (SIGWINCH, SIGCONT, the terminal's stops) at once.
func (w *worker) forwardSignals(ctx context.Context, sigs <-chan os.Signal, pid int) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if isStopSignal(sig) || isPassSignal(sig) {
				w.gate.hear(sig, heardOwn)
				continue
			}
			_ = unix.Kill(-pid, sig)
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
