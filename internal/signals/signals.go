// Package signals is how the gorun command hears the signals sent to it.
//
// The stop signals (SIGTERM, SIGINT, SIGHUP, SIGQUIT: torchrun's
// --signals-to-handle default) stop the run: the first cancels the
// Watcher's context with launch.Signaled as its cause, so the workers get
// that same signal, and a second of any of them asks for an immediate kill.
// The signals gorun passes on (SIGUSR1, SIGUSR2 and those
// --signals-to-handle adds) stop nothing: each goes to Passed, for the run
// to give every worker.
package signals

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/launch"
)

// passBuffer is how many passed signals may wait for the run to take them;
// more are dropped (the run takes them at once while it supervises).
const passBuffer = 8

// Watcher turns the process's signals into a context, a kill channel and
// a stream of signals to pass on. A nil *Watcher hears nothing: its
// context is never cancelled.
type Watcher struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	kill   chan struct{}
	pass   chan syscall.Signal
	ch     chan os.Signal
	quit   chan struct{}
	done   chan struct{}

	mu    sync.Mutex
	first syscall.Signal // the first stop signal, 0 before it
}

// Watch starts hearing the stop signals and SIGUSR1 and SIGUSR2, so none
// of them can kill gorun with its default action.
func Watch() *Watcher {
	ctx, cancel := context.WithCancelCause(context.Background())
	w := &Watcher{ctx: ctx, cancel: cancel, kill: make(chan struct{}),
		pass: make(chan syscall.Signal, passBuffer), ch: make(chan os.Signal, 8),
		quit: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(w.ch, wire.StopSignals()...)
	signal.Notify(w.ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go w.run()
	return w
}

// Pass adds signals to those passed on (Passed).
func (w *Watcher) Pass(sigs ...syscall.Signal) {
	if w == nil {
		return
	}
	for _, sig := range sigs {
		signal.Notify(w.ch, sig)
	}
}

func (w *Watcher) run() {
	defer close(w.done)
	for {
		var s os.Signal
		select {
		case s = <-w.ch:
		case <-w.quit:
			return
		}
		sig := s.(syscall.Signal)
		if !wire.IsStopSignal(sig) {
			select {
			case w.pass <- sig:
			default:
			}
			continue
		}
		w.mu.Lock()
		first := w.first == 0
		if first {
			w.first = sig
		}
		w.mu.Unlock()
		if first {
			w.cancel(launch.Signaled{Sig: sig})
			continue
		}
		select {
		case <-w.kill:
		default:
			close(w.kill)
		}
	}
}

// Context is cancelled by the first stop signal, its cause a
// launch.Signaled.
func (w *Watcher) Context() context.Context {
	if w == nil {
		return context.Background()
	}
	return w.ctx
}

// Kill is closed by a second stop signal.
func (w *Watcher) Kill() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.kill
}

// Passed carries the signals to pass on to the workers.
func (w *Watcher) Passed() <-chan syscall.Signal {
	if w == nil {
		return nil
	}
	return w.pass
}

// First is the first stop signal heard, 0 if none.
func (w *Watcher) First() syscall.Signal {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// Stop stops hearing signals; their default actions apply again.
func (w *Watcher) Stop() {
	if w == nil {
		return
	}
	signal.Stop(w.ch)
	close(w.quit)
	<-w.done
	w.cancel(nil)
}
