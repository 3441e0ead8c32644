package launch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestStepPatterns: every line of testdata/steps.txt (the formats of plain
// prints, nanoGPT, Megatron-LM, torchtitan, tqdm, Lightning and the Hugging
// Face Trainer, with the false matches to avoid) is read as it says.
func TestStepPatterns(t *testing.T) {
	f, err := os.Open("testdata/steps.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		want, text, _ := strings.Cut(l, "|")
		lines++
		tr := newStepTrack(Steps{}, nil, nil)
		now := time.Unix(1000, 0)
		tr.scan([]byte(text+"\n"), now)
		r := tr.result("n", rankIDs{})
		switch {
		case strings.HasPrefix(want, "S "):
			n, _ := strconv.ParseInt(want[2:], 10, 64)
			if r.Steps != 1 || r.LastStep != n {
				t.Errorf("%q: steps %d, last %d; want step %d", text, r.Steps, r.LastStep, n)
			}
		case want == "C":
			if r.Checkpoint.IsZero() {
				t.Errorf("%q: no checkpoint recognised", text)
			}
		case want == "-":
			if r.Steps != 0 || !r.Checkpoint.IsZero() {
				t.Errorf("%q: a false match (steps %d, checkpoint %v)", text, r.Steps, !r.Checkpoint.IsZero())
			}
		}
	}
	if lines < 20 {
		t.Fatalf("read %d lines of testdata/steps.txt", lines)
	}
}

// TestStepCounting: steps counted across a bar's frames (jumps of several
// steps), an epoch's bar beginning again, and repeats; step times from
// the gaps; a user's pattern replaces the defaults.
func TestStepCounting(t *testing.T) {
	tr := newStepTrack(Steps{}, nil, nil)
	at := time.Unix(1000, 0)
	feed := func(d time.Duration, s string) {
		at = at.Add(d)
		tr.scan([]byte(s), at)
	}
	feed(0, "Epoch 0:   0%| | 1/10 [00:00<00:09]\r")
	feed(time.Second, "Epoch 0:  30%| | 3/10 [00:02<00:07]\r")            // 2 steps in 1 s: 500 ms each
	feed(0, "Epoch 0:  30%| | 3/10 [00:02<00:07]\r")                      // a repeat
	feed(3500*time.Millisecond, "Epoch 0: 100%| | 10/10 [00:06<00:00]\n") // 7 in 3.5 s
	feed(time.Second, "Epoch 1:  20%| | 2/10 [00:01<00:08]\r")            // a new bar: 2 more
	r := tr.result("n", rankIDs{local: 1, global: 5})
	if r.Steps != 12 || r.LastStep != 2 || r.Median != 500*time.Millisecond || r.Rank != 5 {
		t.Errorf("got %+v, want 12 steps, last 2, median 500ms, rank 5", r)
	}
	if !r.First.Equal(time.Unix(1000, 0)) || !r.Last.Equal(at) {
		t.Errorf("first %v last %v", r.First, r.Last)
	}
	user := newStepTrack(Steps{Step: regexp.MustCompile(`done (?P<step>\d+)`)}, nil, nil)
	user.scan([]byte("step 4\ndone 9\n"), at)
	if r := user.result("n", rankIDs{}); r.Steps != 1 || r.LastStep != 9 {
		t.Errorf("--step-pattern: %+v, want step 9 only", r)
	}
}

// TestStepCounter: the run's count is each attempt's most advanced
// worker's, the attempts before added, so it only grows.
func TestStepCounter(t *testing.T) {
	c := &stepCounter{}
	a, b := newStepTrack(Steps{}, c, nil), newStepTrack(Steps{}, c, nil)
	at := time.Unix(1000, 0)
	a.scan([]byte("step 1\n"), at)
	a.scan([]byte("step 5\n"), at.Add(time.Second))
	b.scan([]byte("step 1\n"), at)
	b.scan([]byte("step 3\n"), at.Add(time.Second))
	if got := c.total(); got != 5 {
		t.Fatalf("attempt 1: %d steps, want 5 (the most advanced worker's)", got)
	}
	c.attemptEnded()
	next := newStepTrack(Steps{}, c, nil)
	next.scan([]byte("step 1\n"), at)
	next.scan([]byte("step 2\n"), at.Add(time.Second))
	if got := c.total(); got != 7 {
		t.Errorf("after attempt 2's 2 steps: %d, want 7", got)
	}
}

// BenchmarkStepScan is the head's cost per worker line with the step
// scanner and without it, side by side: the rank writer's Write of a
// 64-line chunk, with steps.scan before it (steps=on) as handleFrame does,
// or alone (steps=off). Lines are a training loop's ("step N loss ..."),
// each a step: the scanner's worst case. Compare the ns/op of the two.
func BenchmarkStepScan(b *testing.B) {
	var chunk []byte
	for i := range 64 {
		chunk = fmt.Appendf(chunk, "step %d loss 2.3456 lr 3.0e-04 tokens/s 123456.7 grad_norm 0.98\n", i)
	}
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("steps=%v", map[bool]string{false: "off", true: "on"}[on]), func(b *testing.B) {
			s := newSink(nil)
			l := newNodeLog("node1", 0, false, false)
			w := newRankWriter(l, newLineWriter(l, s, io.Discard), wire.WorkerStarted{Rank: 3, LocalRank: 1}, Prefix{}, 1)
			tr := newStepTrack(Steps{}, &stepCounter{}, nil)
			now := time.Now()
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			for range b.N {
				if on {
					tr.scan(chunk, now)
				}
				w.Write(chunk)
			}
			b.StopTimer()
			w.close()
			s.close()
		})
	}
}

// BenchmarkStepScanFlood: a worker's flood with no step in it, as
// docs/bench/output-flood.sh writes it (64 KB writes of numbered lines
// of letters), a write every 250 us: its output is read for a step no
// more often than a worker's with steps (stepEvery), and looked at for a
// checkpoint in one search.
func BenchmarkStepScanFlood(b *testing.B) {
	letters := bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 10)
	var all []byte
	for seq := 0; len(all) < 1<<20; seq++ {
		off := seq % 26
		all = fmt.Appendf(all, "F %d %s\n", seq, letters[off:off+seq*7%151])
	}
	tr := newStepTrack(Steps{}, &stepCounter{}, nil)
	now := time.Now()
	b.SetBytes(64 << 10)
	b.ResetTimer()
	for i := range b.N {
		o := i * (64 << 10) % (len(all) - 64<<10)
		now = now.Add(250 * time.Microsecond)
		tr.scan(all[o:o+64<<10], now)
	}
}

// TestStepScanThrottled: a worker printing a step per line is read at
// most once per stepEvery, its chunk's last step; the steps between count
// all the same, and the last one, written too soon to be read at once, is
// not lost.
func TestStepScanThrottled(t *testing.T) {
	tr := newStepTrack(Steps{}, nil, nil)
	at := time.Unix(1000, 0)
	step := 0
	for range 100 { // 100 chunks of 10 lines, 1 ms apart
		var chunk []byte
		for range 10 {
			step++
			chunk = fmt.Appendf(chunk, "step %d loss 0.1\n", step)
		}
		tr.scan(chunk, at)
		at = at.Add(time.Millisecond)
	}
	r := tr.result("n", rankIDs{})
	if r.LastStep != 1000 || r.Steps != 1000-10+1 || !r.Last.Equal(at.Add(-time.Millisecond)) {
		t.Errorf("got last step %d, %d steps, last at %v; want 1000, 991 (from the first read, step 10), at the last write", r.LastStep, r.Steps, r.Last)
	}
}

// TestRunCheckpointTouched: a worker's touch of $GORUN_CHECKPOINT_FILE
// (wire.FrameCheckpoint) is its attempt's last checkpoint, at the time it
// came, with --step-pattern off too; a worker that touched none has none.
func TestRunCheckpointTouched(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("steps off %v", off), func(t *testing.T) {
			// touched 20 ms before its frame
			checkpoint := wire.AppendFrame(nil, wire.FrameCheckpoint, append(wire.AppendRank(nil, 0), "20000000"...))
			c := &cluster{plan: [][]script{{{frames: []timedFrame{
				{0, started(0, 0)}, {0, started(1, 1)},
				{30 * ms, checkpoint},
				{30 * ms, exited(0, 0, 0, 0, false, time.Now())}, {0, exited(1, 1, 0, 0, false, time.Now())},
			}, after: 100 * ms}}}}
			begin := time.Now()
			res, err := Run(context.Background(), Options{Attempt: c.attempt, Steps: Steps{Off: off}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Steps) != 1 || len(res.Steps[0].Ranks) != 2 {
				t.Fatalf("steps: %+v", res.Steps)
			}
			for _, r := range res.Steps[0].Ranks {
				switch {
				case r.LocalRank == 0 && (r.Checkpoint.Before(begin) || r.Checkpoint.After(begin.Add(25*ms))):
					t.Errorf("rank 0's checkpoint at %v after the start, want about 10 ms (its frame at 30 ms, touched 20 ms before)", r.Checkpoint.Sub(begin))
				case r.LocalRank == 1 && !r.Checkpoint.IsZero():
					t.Errorf("rank 1 touched nothing, yet has a checkpoint at %v", r.Checkpoint)
				}
			}
		})
	}
}
