package signals

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/launch"
)

// TestWatcher sends this process real signals: SIGUSR1 is passed on and
// stops nothing; the first SIGTERM cancels the context with launch.Signaled
// as its cause; a second stop signal (SIGINT) asks for the kill.
func TestWatcher(t *testing.T) {
	w := Watch()
	defer w.Stop()
	send := func(sig syscall.Signal) {
		if err := syscall.Kill(syscall.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
	}
	send(syscall.SIGUSR1)
	select {
	case sig := <-w.Passed():
		if sig != syscall.SIGUSR1 {
			t.Errorf("passed %v, want SIGUSR1", sig)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SIGUSR1 was not passed on")
	}
	if w.Context().Err() != nil || w.First() != 0 {
		t.Fatalf("SIGUSR1 stopped the run: %v, first %v", w.Context().Err(), w.First())
	}
	send(syscall.SIGTERM)
	select {
	case <-w.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
	var s launch.Signaled
	if !errors.As(context.Cause(w.Context()), &s) || s.Sig != syscall.SIGTERM || w.First() != syscall.SIGTERM {
		t.Errorf("cause %v, first %v; want SIGTERM", context.Cause(w.Context()), w.First())
	}
	select {
	case <-w.Kill():
		t.Fatal("one stop signal asked for the kill")
	default:
	}
	send(syscall.SIGINT)
	select {
	case <-w.Kill():
	case <-time.After(5 * time.Second):
		t.Fatal("a second stop signal did not ask for the kill")
	}
	if w.First() != syscall.SIGTERM {
		t.Errorf("first = %v after SIGINT, want SIGTERM still", w.First())
	}
}

func TestNilWatcher(t *testing.T) {
	var w *Watcher
	w.Pass(syscall.SIGALRM)
	if w.Context().Err() != nil || w.Kill() != nil || w.Passed() != nil || w.First() != 0 {
		t.Error("a nil Watcher hears something")
	}
	w.Stop()
}
