package launch

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/sshexec"
)

func TestAttemptStateString(t *testing.T) {
	for p, want := range map[attemptState]string{
		attemptRunning:     "running",
		attemptAwaitingRAS: "hung: waiting for RAS",
		attemptDumping:     "hung: dumping stacks",
		attemptStopping:    "stopping",
		attemptState(9):    "attemptState(9)",
	} {
		if got := p.String(); got != want {
			t.Errorf("state %d: %q, want %q", int(p), got, want)
		}
	}
}

// TestAttemptStateMoves: forward only, and stopping from anywhere.
func TestAttemptStateMoves(t *testing.T) {
	all := []attemptState{attemptRunning, attemptAwaitingRAS, attemptDumping, attemptStopping}
	allowed := map[[2]attemptState]bool{
		{attemptRunning, attemptAwaitingRAS}:  true,
		{attemptRunning, attemptDumping}:      true,
		{attemptRunning, attemptStopping}:     true,
		{attemptAwaitingRAS, attemptDumping}:  true,
		{attemptAwaitingRAS, attemptStopping}: true,
		{attemptDumping, attemptStopping}:     true,
		{attemptStopping, attemptStopping}:    true,
	}
	for _, from := range all {
		for _, to := range all {
			if got, want := from.canMoveTo(to), allowed[[2]attemptState{from, to}]; got != want {
				t.Errorf("%s → %s: allowed %v, want %v", from, to, got, want)
			}
		}
	}
	for _, p := range all {
		if got, want := p.diagnosing(), p == attemptAwaitingRAS || p == attemptDumping; got != want {
			t.Errorf("%s: diagnosing %v, want %v", p, got, want)
		}
	}
}

func TestEnterRefusesABackwardMove(t *testing.T) {
	for _, tc := range []struct{ from, to attemptState }{
		{attemptDumping, attemptAwaitingRAS},
		{attemptStopping, attemptDumping},
		{attemptStopping, attemptRunning},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s → %s did not panic", tc.from, tc.to)
				}
			}()
			sv := &supervisor{state: tc.from}
			sv.enter(tc.to)
		}()
	}
}

// tellProc is a running node's process that records what it is asked.
type tellProc struct {
	mu    sync.Mutex
	tells []byte
	stops []bool
}

var _ sshexec.Process = (*tellProc)(nil)

func (p *tellProc) Wait() (int, error) { return 0, nil }
func (p *tellProc) Stop(now bool)      { p.mu.Lock(); p.stops = append(p.stops, now); p.mu.Unlock() }
func (p *tellProc) Tell(b ...byte)     { p.mu.Lock(); p.tells = append(p.tells, b...); p.mu.Unlock() }

func (p *tellProc) Interrupt(syscall.Signal, time.Duration) { p.Stop(false) }
func (p *tellProc) Signal(syscall.Signal)                   {}

func (p *tellProc) asked() (string, []bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.tells), append([]bool(nil), p.stops...)
}

// hungAttempt is a supervisor of two running nodes with one worker each,
// silent since long ago; node 0's worker is the RAS reporter when ras is
// set. diag waits for the messages and returns them.
func hungAttempt(t *testing.T, ras bool) (sv *supervisor, procs []*tellProc, diag func() string) {
	t.Helper()
	buf := new(syncBuffer)
	s := newSink(nil)
	closeSink := sync.OnceFunc(func() { s.close() })
	t.Cleanup(closeSink)
	sv = &supervisor{opts: Options{HangTimeout: time.Second, Diag: buf}, s: s}
	long := time.Now().Add(-time.Hour)
	for i, name := range []string{"node1", "node2"} {
		p := &tellProc{}
		procs = append(procs, p)
		m := &member{index: i, node: Node{Name: name}, log: newNodeLog(name, i, false, false), proc: p, running: true,
			workers: map[int]*workerState{0: {started: wire.WorkerStarted{Rank: i, RASReporter: ras && i == 0}, last: long}}}
		sv.ms = append(sv.ms, m)
		sv.started++
	}
	return sv, procs, func() string { closeSink(); return buf.String() }
}

// TestSupervisorHangStates: a hang with a RAS reporter asks for NCCL's
// report first, then for the stacks, then stops; without one it asks for
// the stacks at once. Once stopping, a late RAS report asks for nothing.
func TestSupervisorHangStates(t *testing.T) {
	tests := []struct {
		name      string
		ras       bool
		reporter  func(sv *supervisor) // changes the reporter before the hang
		wantFirst attemptState
		wantTells string // what each node was told, in order, by the end
	}{
		{"RAS reporter", true, nil, attemptAwaitingRAS, string([]byte{wire.TellRAS, wire.TellDump})},
		{"no RAS reporter", false, nil, attemptDumping, string([]byte{wire.TellDump})},
		{"the reporter is done", true, func(sv *supervisor) { sv.ms[0].workers[0].done = true }, attemptDumping, string([]byte{wire.TellDump})},
		{"the reporter's node is gone", true, func(sv *supervisor) { sv.ms[0].running = false }, attemptDumping, string([]byte{wire.TellDump})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sv, procs, diag := hungAttempt(t, tt.ras)
			if tt.reporter != nil {
				tt.reporter(sv)
			}
			if wait := sv.hangCheck(time.Now().Add(-time.Hour)); wait != 0 {
				t.Fatalf("hangCheck = %v, want a hang", wait)
			}
			if sv.state != tt.wantFirst || sv.hang == nil || sv.hang.Code != ExitHang {
				t.Fatalf("after the hang: %s, hang %+v; want %s", sv.state, sv.hang, tt.wantFirst)
			}
			sv.requestDumps() // the RAS report is in (or its wait is over)
			if sv.state != attemptDumping {
				t.Fatalf("after the RAS report: %s, want %s", sv.state, attemptDumping)
			}
			sv.requestDumps() // a second report changes nothing
			sv.stopAll(false)
			sv.requestDumps() // too late: the group is stopping
			if sv.state != attemptStopping {
				t.Fatalf("after the stop: %s", sv.state)
			}
			for i, p := range procs {
				tells, stops := p.asked()
				want := tt.wantTells
				if i == 0 && !sv.ms[0].running {
					want = ""
				}
				if tells != want {
					t.Errorf("node %d told %q, want %q", i, tells, want)
				}
				if sv.ms[i].running && len(stops) != 1 {
					t.Errorf("node %d stopped %v, want once", i, stops)
				}
			}
			if msgs := diag(); strings.Count(msgs, "asking every silent worker for its Python stacks") != 1 {
				t.Errorf("want one request for stacks:\n%s", msgs)
			}
		})
	}
}

// TestSupervisorNoHang: no worker started, or one made progress lately:
// the attempt goes on running.
func TestSupervisorNoHang(t *testing.T) {
	sv, procs, _ := hungAttempt(t, true)
	sv.started = 0
	if wait := sv.hangCheck(time.Now().Add(-time.Hour)); wait != sv.opts.HangTimeout || sv.state != attemptRunning {
		t.Errorf("before any start: wait %v, %s", wait, sv.state)
	}
	sv.started = 2
	sv.ms[1].workers[0].last = time.Now()
	if wait := sv.hangCheck(time.Now().Add(-time.Hour)); wait <= 0 || sv.state != attemptRunning {
		t.Errorf("after recent progress: wait %v, %s", wait, sv.state)
	}
	for i, p := range procs {
		if tells, stops := p.asked(); tells != "" || stops != nil {
			t.Errorf("node %d told %q, stopped %v", i, tells, stops)
		}
	}
}

// TestSupervisorWorkerExitByState: a failed worker stops the group while
// it runs; once stopping it is still a candidate cause; after a hang it is
// a consequence of the diagnosis.
func TestSupervisorWorkerExitByState(t *testing.T) {
	fail := event{i: 1, kind: wire.FrameExit, exit: wire.WorkerExit{Rank: 1, Code: 3}}
	tests := []struct {
		name       string
		prepare    func(sv *supervisor)
		wantStop   bool
		wantCauses int
	}{
		{"running", func(*supervisor) {}, true, 1},
		{"stopping", func(sv *supervisor) { sv.stopAll(false) }, false, 1},
		{"hung", func(sv *supervisor) { sv.hangCheck(time.Now().Add(-time.Hour)) }, false, 0},
		{"hung, then stopping", func(sv *supervisor) { sv.hangCheck(time.Now().Add(-time.Hour)); sv.stopAll(false) }, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sv, _, _ := hungAttempt(t, false)
			tt.prepare(sv)
			before := sv.state
			if got := sv.workerExited(fail); got != tt.wantStop {
				t.Errorf("workerExited in %s = %v, want %v", before, got, tt.wantStop)
			}
			if len(sv.causes) != tt.wantCauses {
				t.Errorf("causes %+v, want %d", sv.causes, tt.wantCauses)
			}
			if sv.state != before {
				t.Errorf("state moved from %s to %s", before, sv.state)
			}
		})
	}
}
