package launch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestSilenceClock: start-up lasts until every expected worker made
// progress once; the longest silence is kept apart in and after it; a
// failed exit ends a worker's start-up but no silence.
func TestSilenceClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := newSilenceClock(t0, 2)
	c.tick(at(1), true, false) // worker 0 starts
	c.tick(at(1.5), true, false)
	c.tick(at(4), false, true) // worker 0's first line: 2.5 s of silence
	if !c.startingUp() {
		t.Fatal("up with one worker of two silent")
	}
	if w, of := c.pending(); w != 1 || of != 2 {
		t.Errorf("pending = %d of %d, want 1 of 2", w, of)
	}
	c.tick(at(5), false, true) // worker 1 joins: start-up over
	if c.startingUp() {
		t.Fatal("still starting up once both made progress")
	}
	c.tick(at(12), false, false) // 7 s of silence
	c.tick(at(13), false, false)
	c.settled(at(40)) // a failed exit ends nothing
	got := c.result(3, at(45), false, false)
	want := Silence{Attempt: 3, StartedUp: true, Startup: 2500 * time.Millisecond, Longest: 7 * time.Second, Ran: 40 * time.Second}
	if got != want {
		t.Errorf("result = %+v\nwant %+v", got, want)
	}

	c = newSilenceClock(t0, 0) // the node does not say how many workers
	c.tick(at(1), true, false)
	c.settled(at(2)) // the only worker died in its imports
	if got := c.result(0, at(3), false, false); !got.StartedUp || got.Startup != time.Second || got.Ran != time.Second {
		t.Errorf("a worker that failed in start-up: %+v", got)
	}
	if (*silenceClock)(nil).startingUp() {
		t.Error("no clock is never starting up")
	}
}

// TestRunStartupTimeout: a silent start-up is judged by StartupTimeout,
// what follows by HangTimeout; each attempt's silences are in the Result.
func TestRunStartupTimeout(t *testing.T) {
	dump := exited(0, 0, -1, 6, true, time.Now())
	tests := []struct {
		name     string
		frames   []timedFrame
		after    time.Duration // exits 0 after this long; 0: runs until stopped
		wantHang string        // "" for success, else a line of the diagnosis
		check    func(t *testing.T, s Silence)
	}{
		{"a silent start-up within its limit", []timedFrame{{0, started(0, 0)}, {400 * ms, line(wire.FrameOut, 0, "imported\n")},
			{20 * ms, exited(0, 0, 0, 0, false, time.Now())}}, 500 * ms, "",
			func(t *testing.T, s Silence) {
				if !s.Succeeded || !s.StartedUp || s.Startup < 350*ms || s.Startup > 900*ms || s.Longest > 200*ms {
					t.Errorf("silence = %+v, want about 400ms in start-up", s)
				}
			}},
		{"silent after start-up", []timedFrame{{0, started(0, 0)}, {0, line(wire.FrameOut, 0, "step 1\n")}}, 0,
			"gorun: hang: no worker made progress (an output line, a write, or a touch of $GORUN_HEARTBEAT_FILE) for 150ms (--hang-timeout)\n",
			func(t *testing.T, s Silence) {
				if !s.Hung || !s.StartedUp || s.Succeeded {
					t.Errorf("silence = %+v, want a hang after start-up", s)
				}
			}},
		{"start-up past its limit", []timedFrame{{0, started(0, 0)}}, 0,
			"gorun: hang: no worker made progress (an output line, a write, or a touch of $GORUN_HEARTBEAT_FILE) for 1s in start-up (1 of 1 workers had made none yet)\n",
			func(t *testing.T, s Silence) {
				if !s.Hung || s.StartedUp {
					t.Errorf("silence = %+v, want a hang in start-up", s)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := script{after: tt.after, stopCode: 143, frames: tt.frames, onTell: map[byte][]byte{wire.TellDump: dump}}
			c := &cluster{plan: [][]script{{sc}}}
			var diag syncBuffer
			res, err := Run(context.Background(), Options{Attempt: c.attempt, HangTimeout: 150 * ms, StartupTimeout: time.Second, Diag: &diag})
			var jf *JobFailed
			switch {
			case tt.wantHang == "" && err != nil:
				t.Fatalf("err = %v, want success:\n%s", err, diag.String())
			case tt.wantHang != "" && (!errors.As(err, &jf) || jf.ExitCode() != ExitHang):
				t.Fatalf("err = %v, want a hang:\n%s", err, diag.String())
			case tt.wantHang != "" && !strings.Contains(diag.String(), tt.wantHang):
				t.Errorf("diag lacks %q:\n%s", tt.wantHang, diag.String())
			}
			if len(res.Silences) != 1 {
				t.Fatalf("silences = %+v, want one", res.Silences)
			}
			tt.check(t, res.Silences[0])
		})
	}
}

// stepLine is a worker's line reporting step n, and what its supervisor
// then tells of it (wire.FrameStep, internal/stepscan).
func stepLine(lr, n int) []byte {
	b := line(wire.FrameOut, lr, fmt.Sprintf("step %d loss 0.5\n", n))
	return wire.AppendFrame(b, wire.FrameStep, fmt.Appendf(wire.AppendRank(nil, lr), "%d 0", n))
}

// TestRunStepStall: workers that go on printing but make no training
// step are a hang once Options.StepTimeout has passed since the last
// step, named as stalled, though no silence is; without a StepTimeout the
// same attempt runs to its end, and its Silence says the longest span
// between two steps. Workers that write without a word after their last
// step (a checkpoint) and print only at the end are no stall.
func TestRunStepStall(t *testing.T) {
	dump := append(exited(0, 0, -1, 6, true, time.Now()), exited(1, 1, -1, 6, true, time.Now())...)
	frames := []timedFrame{{0, started(0, 0)}, {0, started(1, 1)}, {0, line(wire.FrameOut, 1, "loading\n")}}
	for i := 1; i <= 3; i++ {
		frames = append(frames, timedFrame{20 * ms, stepLine(0, i)})
	}
	for range 30 { // 750 ms of lines, none a step
		frames = append(frames, timedFrame{25 * ms, line(wire.FrameOut, 0, "logging from a thread\n")})
	}
	frames = append(frames, timedFrame{0, exited(0, 0, 0, 0, false, time.Now())}, timedFrame{0, exited(1, 1, 0, 0, false, time.Now())})
	sc := script{stopCode: 143, frames: frames, after: 900 * ms, onTell: map[byte][]byte{wire.TellDump: dump}}

	var diag syncBuffer
	c := &cluster{plan: [][]script{{sc}}}
	_, err := Run(context.Background(), Options{Attempt: c.attempt, HangTimeout: 5 * time.Second, StepTimeout: 200 * ms, Diag: &diag})
	var jf *JobFailed
	if !errors.As(err, &jf) || jf.ExitCode() != ExitHang || !strings.Contains(jf.Failure.Reason, "no training step for 200ms") {
		t.Fatalf("err = %v, want a hang for want of steps:\n%s", err, diag.String())
	}
	if d := diag.String(); !strings.Contains(d, "gorun: hang: no worker made a training step for 200ms") || !strings.Contains(d, "gorun:   stalled: node1 rank 0") {
		t.Errorf("diag:\n%s", d)
	}

	c = &cluster{plan: [][]script{{sc}}}
	res, err := Run(context.Background(), Options{Attempt: c.attempt, HangTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("without StepTimeout: %v", err)
	}
	if s := res.Silences[0]; s.LongestStep < 10*ms || s.LongestStep > 150*ms {
		t.Errorf("longest span between steps %v, want about 20 ms", s.LongestStep)
	}

	writes := slices.Clone(frames[:6]) // the start and the steps
	for range 30 {
		writes = append(writes, timedFrame{25 * ms, wire.AppendFrame(nil, wire.FrameProgress, wire.AppendRank(nil, 0))})
	}
	writes = append(writes, timedFrame{0, line(wire.FrameOut, 0, "checkpoint written\n")}, timedFrame{30 * ms, exited(0, 0, 0, 0, false, time.Now())},
		timedFrame{0, exited(1, 1, 0, 0, false, time.Now())})
	c = &cluster{plan: [][]script{{{stopCode: 143, frames: writes, after: 950 * ms, onTell: map[byte][]byte{wire.TellDump: dump}}}}}
	var quiet syncBuffer
	if _, err := Run(context.Background(), Options{Attempt: c.attempt, HangTimeout: 5 * time.Second, StepTimeout: 200 * ms, Diag: &quiet}); err != nil {
		t.Fatalf("a quiet checkpoint taken for a stall: %v\n%s", err, quiet.String())
	}
}
