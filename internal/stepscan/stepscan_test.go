package stepscan

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// found is what a Scanner told.
type found struct {
	mu          sync.Mutex
	steps       []int64
	at          []time.Time
	checkpoints []time.Time
}

func (f *found) scanner(p Patterns) *Scanner {
	return New(p, func(n int64, at time.Time) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.steps, f.at = append(f.steps, n), append(f.at, at)
	}, func(at time.Time) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.checkpoints = append(f.checkpoints, at)
	})
}

// TestPatterns: every line of testdata/steps.txt (the formats of plain
// prints, nanoGPT, Megatron-LM, torchtitan, tqdm, Lightning and the Hugging
// Face Trainer, with the false matches to avoid) is read as it says.
func TestPatterns(t *testing.T) {
	file, err := os.Open("testdata/steps.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	lines := 0
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		want, text, _ := strings.Cut(l, "|")
		lines++
		var f found
		s := f.scanner(Patterns{})
		s.Scan([]byte(text+"\n"), time.Unix(1000, 0))
		s.Close()
		switch {
		case strings.HasPrefix(want, "S "):
			n, _ := strconv.ParseInt(want[2:], 10, 64)
			if len(f.steps) != 1 || f.steps[0] != n {
				t.Errorf("%q: steps %v; want step %d", text, f.steps, n)
			}
		case want == "C":
			if len(f.checkpoints) == 0 {
				t.Errorf("%q: no checkpoint recognised", text)
			}
		case want == "-":
			if len(f.steps) != 0 || len(f.checkpoints) != 0 {
				t.Errorf("%q: a false match (steps %v, checkpoints %d)", text, f.steps, len(f.checkpoints))
			}
		}
	}
	if lines < 20 {
		t.Fatalf("read %d lines of testdata/steps.txt", lines)
	}
}

// TestUserPatterns: --step-pattern and --checkpoint-pattern replace the
// defaults, and travel in the environment intact; Off reads nothing.
func TestUserPatterns(t *testing.T) {
	p := Patterns{Step: regexp.MustCompile(`done (?P<step>\d+)`), Checkpoint: regexp.MustCompile(`ckpt ok`)}
	got, err := Decode(p.Encode())
	if err != nil || got.Step.String() != p.Step.String() || got.Checkpoint.String() != p.Checkpoint.String() || got.Off {
		t.Fatalf("Decode(Encode()) = %+v, %v", got, err)
	}
	var f found
	s := f.scanner(got)
	s.Scan([]byte("step 4\ncheckpoint saved\ndone 9\n"), time.Unix(1000, 0))
	s.Close()
	if len(f.steps) != 1 || f.steps[0] != 9 || len(f.checkpoints) != 0 {
		t.Errorf("steps %v, %d checkpoints; want step 9 only", f.steps, len(f.checkpoints))
	}
	if d, err := Decode(Patterns{}.Encode()); err != nil || d.Off || d.Step != nil {
		t.Errorf("the defaults: %+v, %v", d, err)
	}
	if d, _ := Decode(Patterns{Off: true}.Encode()); !d.Off || New(d, nil, nil) != nil {
		t.Errorf("off: %+v", d)
	}
	if _, err := Decode(`{"step":"("}`); err == nil {
		t.Error("a broken pattern decoded")
	}
}

// TestThrottled: a worker printing a step per line is read at most once
// per Every, its chunk's last step; the last one, written too soon to be
// read at once, is told all the same, once its read is due, at the time
// it was written.
func TestThrottled(t *testing.T) {
	var f found
	s := f.scanner(Patterns{})
	start := time.Now()
	at := start
	step := 0
	for range 100 { // 100 chunks of 10 lines, 100 us apart: all within Every
		var chunk []byte
		for range 10 {
			step++
			chunk = fmt.Appendf(chunk, "step %d loss 0.1\n", step)
		}
		s.Scan(chunk, at)
		at = at.Add(100 * time.Microsecond)
	}
	if len(f.steps) != 1 || f.steps[0] != 10 {
		t.Fatalf("told %v before the next read was due, want [10]", f.steps)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		f.mu.Lock()
		n := len(f.steps)
		f.mu.Unlock()
		if n > 1 {
			break // the pending read's timer
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.steps) != 2 || f.steps[1] != 1000 || !f.at[1].Equal(at.Add(-100*time.Microsecond)) {
		t.Errorf("told %v at %v; want [10 1000], the last at its write", f.steps, f.at)
	}
}

// TestCloseReadsPending: a step still pending when the output ends is
// told at Close, though lines without one followed it in its write; and
// nothing after it.
func TestCloseReadsPending(t *testing.T) {
	var f found
	s := f.scanner(Patterns{})
	now := time.Now()
	s.Scan([]byte("step 1\n"), now)
	s.Scan([]byte("step 2 loss 0.3\nsaved the metrics\nsteps=done\n"), now.Add(time.Millisecond)) // its step is not its last line
	s.Close()
	s.Scan([]byte("step 3\n"), now.Add(2*time.Millisecond)) // not due: pending, no timer once closed
	time.Sleep(2 * Every)
	f.mu.Lock()
	defer f.mu.Unlock()
	if fmt.Sprint(f.steps) != "[1 2]" {
		t.Errorf("told %v, want [1 2]", f.steps)
	}
}

// TestDueReadKeepsPending: a step left pending by a write too soon is
// told when the next read is due, though that write holds no step.
func TestDueReadKeepsPending(t *testing.T) {
	var f found
	s := f.scanner(Patterns{})
	now := time.Now()
	s.Scan([]byte("step 5\n"), now)
	s.Scan([]byte("step 6\n"), now.Add(5*time.Millisecond))      // pending
	s.Scan([]byte("a log line\n"), now.Add(12*time.Millisecond)) // due, no step
	f.mu.Lock()
	got := fmt.Sprint(f.steps)
	f.mu.Unlock()
	s.Close()
	if got != "[5 6]" {
		t.Errorf("told %s by the due read, want [5 6]", got)
	}
}

// BenchmarkScanFlood: a worker's flood with no step in it, as
// docs/bench/output-flood.sh writes it (64 KB writes of numbered lines
// of letters), a write every 250 us: its output is read for a step no
// more often than a worker's with steps (Every), and looked at for a
// checkpoint in one search.
func BenchmarkScanFlood(b *testing.B) {
	letters := bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 10)
	var all []byte
	for seq := 0; len(all) < 1<<20; seq++ {
		off := seq % 26
		all = fmt.Appendf(all, "F %d %s\n", seq, letters[off:off+seq*7%151])
	}
	s := New(Patterns{}, func(int64, time.Time) {}, func(time.Time) {})
	now := time.Now()
	b.SetBytes(64 << 10)
	b.ResetTimer()
	for i := range b.N {
		o := i * (64 << 10) % (len(all) - 64<<10)
		now = now.Add(250 * time.Microsecond)
		s.Scan(all[o:o+64<<10], now)
	}
	b.StopTimer()
	s.Close()
}
