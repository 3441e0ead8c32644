package launch

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
		tr := newStepTrack(Steps{}, nil)
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
	tr := newStepTrack(Steps{}, nil)
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
	user := newStepTrack(Steps{Step: regexp.MustCompile(`done (?P<step>\d+)`)}, nil)
	user.scan([]byte("step 4\ndone 9\n"), at)
	if r := user.result("n", rankIDs{}); r.Steps != 1 || r.LastStep != 9 {
		t.Errorf("--step-pattern: %+v, want step 9 only", r)
	}
}

// TestStepCounter: the run's count is each attempt's most advanced
// worker's, the attempts before added, so it only grows.
func TestStepCounter(t *testing.T) {
	c := &stepCounter{}
	a, b := newStepTrack(Steps{}, c), newStepTrack(Steps{}, c)
	at := time.Unix(1000, 0)
	a.scan([]byte("step 1\nstep 5\n"), at)
	b.scan([]byte("step 1\nstep 3\n"), at)
	if got := c.total(); got != 5 {
		t.Fatalf("attempt 1: %d steps, want 5 (the most advanced worker's)", got)
	}
	c.attemptEnded()
	newStepTrack(Steps{}, c).scan([]byte("step 1\nstep 2\n"), at)
	if got := c.total(); got != 7 {
		t.Errorf("after attempt 2's 2 steps: %d, want 7", got)
	}
}
