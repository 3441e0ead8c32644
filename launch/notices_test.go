package launch

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/wire"
)

// TestNodeNotices: a notice is said once per node (once per kind, for
// noteOnce); past collapseNotices nodes with the same text the rest wait
// for flush, which names them in one line with a host list; another text
// keeps its own count.
func TestNodeNotices(t *testing.T) {
	nn := newNodeNotices()
	var lines []string
	say := func(s string) {
		if s != "" {
			lines = append(lines, strings.Split(strings.TrimSuffix(s, "\n"), "\n")...)
		}
	}
	const cold = "torchrun starts cold: the torchrun command is not a Python entry point"
	for i := range 1000 {
		say(nn.note(fmt.Sprintf("node%d", i), cold))
		say(nn.note(fmt.Sprintf("node%d", i), cold)) // the same node again: nothing
	}
	say(nn.noteOnce("node3", "pool", "workers start without the worker pool: why"))
	say(nn.noteOnce("node3", "pool", "workers start without the worker pool: another rank's reason"))
	say(nn.flush())
	say(nn.flush()) // nothing more
	want := []string{}
	for i := range collapseNotices {
		want = append(want, fmt.Sprintf("gorun: node%d: %s", i, cold))
	}
	want = append(want, "gorun: node3: workers start without the worker pool: why",
		fmt.Sprintf("gorun: %d more nodes alike (node[%d-999]): %s", 1000-collapseNotices, collapseNotices, cold))
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// A node noted after a flush (a spare that stepped in) is gathered
	// again, and said at the next flush.
	say(nn.note("spare0", cold))
	if got := nn.flush(); got != "gorun: 1 more node alike (spare0): "+cold+"\n" {
		t.Errorf("after the first flush: %q", got)
	}
}

// TestRunCollapsesNodeNotices: twenty nodes whose restart's torchrun all
// start cold for the same reason print eight lines of their own and one
// that names the other twelve, not twenty. The first attempt's say
// nothing: its torchrun started ahead only where it could (WarmFirst).
func TestRunCollapsesNodeNotices(t *testing.T) {
	const why = "the program changed (/opt/wrapper)"
	cold := wire.AppendFrame(nil, wire.FrameStart, wire.JSON(wire.StartInfo{Cold: why}))
	var first, restart []script
	for i := range 20 {
		sc := script{frames: []timedFrame{{0, cold}}, after: 20 * ms}
		restart = append(restart, sc)
		if i == 0 {
			sc.code = 1
		}
		first = append(first, sc)
	}
	c := &cluster{plan: [][]script{first, restart}}
	var diag syncBuffer
	if _, err := Run(context.Background(), Options{Attempt: c.attempt, Diag: &diag, MaxRestarts: 1}); err != nil {
		t.Fatal(err)
	}
	out := diag.String()
	if before, _, _ := strings.Cut(out, "restart"); strings.Contains(before, "starts cold") {
		t.Errorf("the first attempt's cold starts were said:\n%s", out)
	}
	own := regexp.MustCompile(`(?m)^gorun: node\d+: torchrun starts cold: ` + regexp.QuoteMeta(why) + `$`)
	more := regexp.MustCompile(`(?m)^gorun: 12 more nodes alike \((node[\[\]0-9,-]+)\): torchrun starts cold: ` + regexp.QuoteMeta(why) + `$`)
	m := more.FindStringSubmatch(out)
	if n := len(own.FindAllString(out, -1)); n != collapseNotices || m == nil {
		t.Fatalf("%d lines of their own (want %d) and the collapsed line %v:\n%s", n, collapseNotices, m != nil, out)
	}
	if names, err := hosts.ExpandSlurmHostlist(m[1]); err != nil || len(names) != 12 {
		t.Errorf("the collapsed line names %q: %v, %v", m[1], names, err)
	}
}
