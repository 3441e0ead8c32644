package launch

import (
	"github.com/gorun/gorun/internal/wire"

	"bytes"
	"testing"
	"time"
)

// fakeClock drives lineWriter's live flushes by hand: its timer only
// records when flushHeld is due, and tick fires it.
type fakeClock struct {
	now  time.Time
	due  time.Time
	fire func()
}

func (c *fakeClock) afterFunc(d time.Duration, f func()) stopper {
	c.due, c.fire = c.now.Add(d), f
	return c
}

func (c *fakeClock) Stop() bool { c.fire = nil; return true }

// tick moves the clock on by d, firing the pending flush when it is due
// (again, where it arms itself anew for a time that has come).
func (c *fakeClock) tick(d time.Duration) {
	c.now = c.now.Add(d)
	for c.fire != nil && !c.now.Before(c.due) {
		f := c.fire
		c.fire = nil
		f()
	}
}

// liveStep is a write to one local rank's stream, or, with an empty text,
// a wait.
type liveStep struct {
	rank int
	text string
	wait time.Duration
}

func w0(s string) liveStep          { return liveStep{text: s} }
func wait(d time.Duration) liveStep { return liveStep{wait: d} }

// live runs steps through the stdout writers of local ranks 0 and 1 of
// node1 (plain: localhost's, in plain mode) and returns what reached Out.
func live(plain bool, steps ...liveStep) string {
	var out bytes.Buffer
	s := newSink(nil)
	l := newNodeLog("node1", 0, false, plain)
	parent := newLineWriter(l, s, &out)
	c := &fakeClock{now: time.Unix(1000, 0)}
	var ws [2]*lineWriter
	for r := range ws {
		ws[r] = newRankWriter(l, parent, wire.WorkerStarted{Rank: r, LocalRank: r}, Prefix{}, 1)
		ws[r].now = func() time.Time { return c.now }
		ws[r].afterFunc = c.afterFunc
	}
	for _, st := range steps {
		if st.text == "" {
			c.tick(st.wait)
			continue
		}
		ws[st.rank].Write([]byte(st.text))
	}
	for _, w := range ws {
		w.close()
	}
	s.message(&out, "gorun: done\n")
	s.close()
	return out.String()
}

func TestLiveLines(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		plain bool
		steps []liveStep
		want  string
	}{
		{"plain: a bar streams as written", true,
			[]liveStep{w0("\r 1/3"), wait(100 * ms), w0("\r 2/3"), wait(100 * ms), w0("\r 3/3"), w0("\n")},
			"\r 1/3\r 2/3\r 3/3\ngorun: done\n"},
		{"plain: CRLF kept", true, []liveStep{w0("a\r\n"), w0("b\r"), wait(time.Second), w0("\n")}, "a\r\nb\r\ngorun: done\n"},
		{"plain: last line without newline kept; gorun's text on a line of its own", true,
			[]liveStep{w0("no newline")}, "no newline\ngorun: done\n"},
		{"plain: a line in two writes stays whole", true,
			[]liveStep{w0("text"), wait(50 * ms), {rank: 1, text: "other\n"}, w0("\n")}, "other\ntext\ngorun: done\n"},
		{"plain: held past the age, another rank's line follows the piece", true,
			[]liveStep{w0("50%"), wait(100 * ms), {rank: 1, text: "other\n"}, w0("\n")}, "50%other\n\ngorun: done\n"},
		{"prefixed: first piece after the age, then one a second, the current frame only", false,
			[]liveStep{w0("\r 1/9"), wait(99 * ms), w0("\r 2/9"), wait(1 * ms), w0("\r 3/9"), wait(100 * ms),
				w0("\r 4/9"), wait(800 * ms), w0("\r 5/9"), wait(200 * ms), w0("\r 6/9\r 9/9\n")},
			"[node1 0 r0]  2/9\n[node1 0 r0]+  5/9\n[node1 0 r0]+  9/9\ngorun: done\n"},
		{"prefixed: no other rank's line glued to a piece", false,
			[]liveStep{w0("\r 10%"), wait(100 * ms), {rank: 1, text: "hello\n"}, w0("\r 100%\n")},
			"[node1 0 r0]  10%\n[node1 1 r1] hello\n[node1 0 r0]+  100%\ngorun: done\n"},
		{"prefixed: a line in two writes stays whole", false, []liveStep{w0("text"), wait(99 * ms), w0("\n")},
			"[node1 0 r0] text\ngorun: done\n"},
		{"prefixed: a UTF-8 sequence is not cut", false, []liveStep{w0("ab\xc3"), wait(100 * ms), w0("\xa9\n")},
			"[node1 0 r0] ab\n[node1 0 r0]+ é\ngorun: done\n"},
		{"prefixed: carriage returns alone show nothing", false, []liveStep{w0("\r"), wait(time.Second), w0("done\n")},
			"[node1 0 r0] done\ngorun: done\n"},
		{"prefixed: a piece then the newline alone", false, []liveStep{w0("50%"), wait(100 * ms), w0("\n")},
			"[node1 0 r0] 50%\ngorun: done\n"},
		{"prefixed: last line without newline ends with one", false, []liveStep{w0("tail")},
			"[node1 0 r0] tail\ngorun: done\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := live(tt.plain, tt.steps...); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
