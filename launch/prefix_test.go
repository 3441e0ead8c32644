package launch

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestSafeSubstitute: the template is filled as Python's
// string.Template.safe_substitute fills it.
func TestSafeSubstitute(t *testing.T) {
	f := map[string]string{"rank": "11", "local_rank": "3", "role_name": "trainer", "node": "gpu7"}
	for in, want := range map[string]string{
		"[${role_name}${rank}]:": "[trainer11]:",
		"$rank|$local_rank ":     "11|3 ",
		"${node}:${rank}>":       "gpu7:11>",
		"$$rank":                 "$rank",
		"$unknown ${unknown}":    "$unknown ${unknown}",
		"cost $5 ${":             "cost $5 ${",
		"${rank":                 "${rank",
		"$ranks":                 "$ranks", // the name is "ranks", not "rank"
		"$rank_x${rank}x":        "$rank_x11x",
		"trailing $":             "trailing $",
		"":                       "",
	} {
		if got := safeSubstitute(in, f); got != want {
			t.Errorf("safeSubstitute(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRunPrefixes: the default prefix carries node, local and global
// rank; TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE replaces it, with gorun's
// ${node} and ${hostname}; in plain mode a stream torchrun tees has
// torchrun's "[default0]:" (or the template), another none; torchrun's
// own copies of the lines are dropped whichever prefix they carry.
func TestRunPrefixes(t *testing.T) {
	st := func(lr, rank int) []byte {
		return wire.AppendFrame(nil, wire.FrameStarted, wire.JSON(wire.WorkerStarted{Rank: rank, LocalRank: lr, PID: 500 + rank, Supervisor: 400 + rank, Host: "host-a"}))
	}
	teeBoth := func(int) int { return 3 }
	teeOut := func(lr int) int { return map[int]int{1: 1}[lr] }
	for _, tc := range []struct {
		name   string
		plain  bool
		prefix Prefix
		copies string // torchrun's console: its --tee copies, then a line of its own
		want   string
	}{
		{"default", false, Prefix{}, "[default1]:b\n", "[node1 1 r5] b\n[node1 0 r4] a\n[node1] own\n"},
		{"template", false, Prefix{Template: "${node}/${hostname} ${role_name}${rank}.${local_rank} pid=$pid $other|", Role: "tr"},
			"${node}/${hostname} tr5.1 pid=405 $other|b\n", "node1/host-a tr5.1 pid=505 $other|b\nnode1/host-a tr4.0 pid=504 $other|a\n[node1] own\n"},
		{"template, a torchrun older than it", false, Prefix{Template: "<$rank>"}, "[default1]:b\n", "<5>b\n<4>a\n[node1] own\n"},
		{"plain, no --tee", true, Prefix{}, "", "b\na\nown\n"},
		{"plain, --tee 3", true, Prefix{Tee: teeBoth}, "[default1]:b\n[default0]:a\n", "[default1]:b\n[default0]:a\nown\n"},
		{"plain, --tee 0:0,1:1", true, Prefix{Tee: teeOut}, "[default1]:b\n", "[default1]:b\na\nown\n"},
		{"plain, --tee 3, template", true, Prefix{Tee: teeBoth, Template: "[${rank}:${pid}]"}, "[5:405]b\n[4:404]a\n", "[5:505]b\n[4:504]a\nown\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := script{after: 50 * ms, frames: []timedFrame{{0, st(0, 4)}, {0, st(1, 5)},
				{0, line(wire.FrameOut, 1, "b\n")}, {0, line(wire.FrameOut, 0, "a\n")},
				{0, wire.AppendFrame(nil, wire.FrameStdout, []byte(tc.copies+"own\n"))},
				{0, exited(0, 4, 0, 0, false, time.Now())}, {0, exited(1, 5, 0, 0, false, time.Now())}}}
			c := &cluster{plan: [][]script{{sc}}}
			var out syncBuffer
			if _, err := Run(context.Background(), Options{Attempt: c.attempt, Out: &out, Plain: tc.plain, Prefix: tc.prefix}); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Errorf("out = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunWorkerTimestamps: with Prefix.Stamp every line of the nodes
// begins with the time it came, RFC 3339 with milliseconds.
func TestRunWorkerTimestamps(t *testing.T) {
	sc := script{after: 50 * ms, frames: []timedFrame{{0, started(0, 0)}, {0, line(wire.FrameOut, 0, "hello\n")},
		{0, wire.AppendFrame(nil, wire.FrameStdout, []byte("torchrun says\n"))},
		{0, exited(0, 0, 0, 0, false, time.Now())}}}
	c := &cluster{plan: [][]script{{sc}}}
	var out syncBuffer
	if _, err := Run(context.Background(), Options{Attempt: c.attempt, Out: &out, Prefix: Prefix{Stamp: true}}); err != nil {
		t.Fatal(err)
	}
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d) `
	if re := regexp.MustCompile(`^` + stamp + `\[node1 0 r0\] hello\n` + stamp + `\[node1\] torchrun says\n$`); !re.MatchString(out.String()) {
		t.Errorf("out = %q, want %s", out.String(), re)
	}
}
