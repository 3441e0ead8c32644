package rank

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeGate is a signalGate on a clock the test moves.
type fakeGate struct {
	*signalGate
	t       time.Time
	pending []pendingCall
	got     []syscall.Signal
	stops   int
}

type pendingCall struct {
	at time.Time
	f  func()
}

func newFakeGate() *fakeGate {
	f := &fakeGate{t: time.Unix(1000, 0)}
	f.signalGate = newSignalGate(func(sig syscall.Signal) { f.got = append(f.got, sig) }, func() { f.stops++ })
	f.now = func() time.Time { return f.t }
	f.after = func(d time.Duration, fn func()) { f.pending = append(f.pending, pendingCall{f.t.Add(d), fn}) }
	return f
}

// advance moves the clock by d, running what falls due in order.
func (f *fakeGate) advance(d time.Duration) {
	end := f.t.Add(d)
	for {
		slices.SortStableFunc(f.pending, func(a, b pendingCall) int { return a.at.Compare(b.at) })
		if len(f.pending) == 0 || f.pending[0].at.After(end) {
			break
		}
		p := f.pending[0]
		f.pending = f.pending[1:]
		f.t = p.at
		p.f()
	}
	f.t = end
}

// TestSignalGate: whichever ways a signal comes, and in whatever order
// within a moment, the worker gets it once, or not at all when it has its
// own copy (a signal sent to every process of the job).
func TestSignalGate(t *testing.T) {
	const (
		term = syscall.SIGTERM
		usr1 = syscall.SIGUSR1
	)
	type step struct {
		after time.Duration // before this step
		sig   syscall.Signal
		how   int
	}
	tests := []struct {
		name  string
		steps []step
		want  []syscall.Signal
	}{
		{"the head's stop", []step{{0, term, heardAsk}}, []syscall.Signal{term}},
		{"torchrun's stop, then the head's", []step{{0, term, heardOwn}, {30 * time.Millisecond, term, heardAsk}}, []syscall.Signal{term}},
		{"the head's stop, then torchrun's late one", []step{{0, term, heardAsk}, {2 * time.Second, term, heardOwn}}, []syscall.Signal{term}},
		{"a stop sent to the whole step", []step{{0, term, heardOwn}, {time.Millisecond, term, heardHad}, {20 * time.Millisecond, term, heardAsk}}, nil},
		{"the agent's word first", []step{{0, term, heardHad}, {time.Millisecond, term, heardOwn}}, nil},
		{"the agent alone was signalled", []step{{0, term, heardHad}}, []syscall.Signal{term}},
		{"a stop is once for good", []step{{0, term, heardAsk}, {10 * time.Second, term, heardAsk}, {time.Minute, term, heardOwn}}, []syscall.Signal{term}},
		{"two different stops", []step{{0, term, heardAsk}, {time.Second, syscall.SIGINT, heardAsk}}, []syscall.Signal{term, syscall.SIGINT}},
		{"the head passes USR1", []step{{0, usr1, heardAsk}}, []syscall.Signal{usr1}},
		{"USR1 to the whole step, the head's copy late", []step{{0, usr1, heardOwn}, {500 * time.Millisecond, usr1, heardAsk}}, nil},
		{"USR1 to the whole step, the head's copy first", []step{{0, usr1, heardAsk}, {5 * time.Millisecond, usr1, heardOwn}}, nil},
		{"USR1 twice, a minute apart", []step{{0, usr1, heardAsk}, {time.Minute, usr1, heardAsk}}, []syscall.Signal{usr1, usr1}},
		{"USR1 asked twice at once", []step{{0, usr1, heardAsk}, {10 * time.Millisecond, usr1, heardAsk}}, []syscall.Signal{usr1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newFakeGate()
			var trace []string
			for _, s := range tc.steps {
				g.advance(s.after)
				g.hear(s.sig, s.how)
				trace = append(trace, fmt.Sprintf("+%v %v/%d", s.after, s.sig, s.how))
			}
			g.advance(time.Hour)
			if !slices.Equal(g.got, tc.want) {
				t.Errorf("%s: worker got %v, want %v", strings.Join(trace, ", "), g.got, tc.want)
			}
			stops := 0
			for _, s := range tc.steps {
				if isStopSignal(s.sig) {
					stops++
				}
			}
			if g.stops != stops {
				t.Errorf("stopped told %d times, want %d (every stop signal heard)", g.stops, stops)
			}
		})
	}
}
