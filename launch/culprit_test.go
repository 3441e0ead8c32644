package launch

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/pystack"
)

// realDump reads one of internal/pystack's real faulthandler dumps, with
// its script's source lines.
func realDump(t *testing.T, name string) *pystack.Dump {
	t.Helper()
	dir := filepath.Join("..", "internal", "pystack", "testdata")
	b, err := os.ReadFile(filepath.Join(dir, name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := pystack.ParseFaulthandler(string(b))
	pystack.AddSource(&d, func(file string) (io.ReadCloser, error) {
		return os.Open(filepath.Join(dir, "src", filepath.Base(file)))
	})
	return &d
}

// ranksOf lays out ranks over nodes of perNode ranks each, node0 first,
// rank r's dump given by dump(r).
func ranksOf(n, perNode int, dump func(r int) *pystack.Dump) []RankStacks {
	rs := make([]RankStacks, n)
	for r := range rs {
		rs[r] = RankStacks{Node: fmt.Sprintf("node%d", r/perNode), NodeIndex: r / perNode, Rank: r, LocalRank: r % perNode, Dump: dump(r)}
	}
	return rs
}

// TestHangCulpritLines: the culprit lines, from real dumps, at the sizes
// the README describes: the 3 nodes × 2 ranks, every rank in one
// collective, a mismatch, a rank that sent nothing, DDP, 1,000 ranks.
func TestHangCulpritLines(t *testing.T) {
	stuck, reduce := realDump(t, "py311-torch113-hang-r1"), realDump(t, "py311-torch113-hang-r0")
	barrier := realDump(t, "py311-torch113-mismatch-r0")
	tests := []struct {
		name    string
		ranks   []RankStacks
		lagging []int    // NCCL's RAS report
		want    []string // the console's lines, in order, up to the stack
		stack   string   // the first line of the culprit's stack
	}{
		{
			name: "3 nodes × 2 ranks, rank 4 sleeps",
			ranks: ranksOf(6, 2, func(r int) *pystack.Dump {
				if r == 4 {
					return stuck
				}
				return reduce
			}),
			want: []string{
				"gorun: hang: stuck: node2 rank 4 at hang.py:5 time.sleep(3600) — not in a collective",
				"gorun: hang: waiting: 5 ranks (0-3,5 on node[0-2]) in all_reduce at hang.py:6 t = torch.ones(4); dist.all_reduce(t)",
			},
			stack: "gorun: hang: node2 rank 4, thread 0x00007f26c81ec040, by faulthandler (most recent call first):",
		},
		{
			name:  "every rank in the same collective",
			ranks: ranksOf(2, 2, func(int) *pystack.Dump { return reduce }),
			want: []string{
				"gorun: hang: waiting: all 2 ranks (0-1 on node0) in all_reduce at hang.py:6 t = torch.ones(4); dist.all_reduce(t)",
				"gorun: hang: no rank is stuck in Python: every rank waits in the same collective, so the cause is below it " +
					"(the network, a GPU, a rank stuck in native code); NCCL's RAS report (NCCL >= 2.24, printed above when there is one) " +
					"names ranks that lag, and --flight-recorder DIR keeps every rank's last collectives",
			},
			stack: "gorun: hang: node0 rank 0, thread 0x00007f2484ff9040, by faulthandler (most recent call first):",
		},
		{
			name:    "every rank in the same collective, and NCCL's RAS names the one behind",
			ranks:   ranksOf(2, 2, func(int) *pystack.Dump { return reduce }),
			lagging: []int{1},
			want: []string{
				"gorun: hang: waiting: all 2 ranks (0-1 on node0) in all_reduce at hang.py:6 t = torch.ones(4); dist.all_reduce(t)",
				"gorun: hang: NCCL's RAS: rank 1 is behind the others in their collective count (did not join a collective, or did not answer): node0 rank 1 in all_reduce at hang.py:6",
				"gorun: hang: no rank is stuck in Python: every rank waits in the same collective, so the cause is below it " +
					"(the network, a GPU, a rank stuck in native code); NCCL's RAS report (NCCL >= 2.24, printed above when there is one) " +
					"names ranks that lag, and --flight-recorder DIR keeps every rank's last collectives",
			},
			stack: "gorun: hang: node0 rank 1, thread 0x00007f2484ff9040, by faulthandler (most recent call first):",
		},
		{
			name: "a stuck rank that NCCL's RAS names too",
			ranks: ranksOf(6, 2, func(r int) *pystack.Dump {
				if r == 4 {
					return stuck
				}
				return reduce
			}),
			lagging: []int{4, 4},
			want: []string{
				"gorun: hang: stuck: node2 rank 4 at hang.py:5 time.sleep(3600) — not in a collective",
				"gorun: hang: waiting: 5 ranks (0-3,5 on node[0-2]) in all_reduce at hang.py:6 t = torch.ones(4); dist.all_reduce(t)",
				"gorun: hang: NCCL's RAS: rank 4 is behind the others in their collective count (did not join a collective, or did not answer): node2 rank 4 at hang.py:5, not in a collective",
			},
			stack: "gorun: hang: node2 rank 4, thread 0x00007f26c81ec040, by faulthandler (most recent call first):",
		},
		{
			name: "a mismatch: barrier on one rank, all_reduce on two",
			ranks: ranksOf(3, 3, func(r int) *pystack.Dump {
				if r == 0 {
					return barrier
				}
				return reduce
			}),
			want: []string{
				"gorun: hang: waiting: node0 rank 0 in barrier at scen.py:38 dist.barrier()",
				"gorun: hang: waiting: node0 rank 1, node0 rank 2 in all_reduce at hang.py:6 t = torch.ones(4); dist.all_reduce(t)",
				"gorun: hang: no rank is stuck in Python, but the ranks wait in different places: collectives called in a different order on some ranks, or one that some ranks skipped",
			},
		},
		{
			name: "a thread that holds the GIL: rank 1 stays in the first all_reduce, the others wait in the next",
			ranks: ranksOf(3, 3, func(r int) *pystack.Dump {
				if r == 1 {
					return realDump(t, "py311-torch113-gil-r1")
				}
				return realDump(t, "py311-torch113-gil-r0")
			}),
			want: []string{
				"gorun: hang: waiting: node0 rank 1 in all_reduce at hang_gil.py:11 t = torch.ones(4); dist.all_reduce(t)",
				"gorun: hang: waiting: node0 rank 0, node0 rank 2 in all_reduce at hang_gil.py:12 dist.all_reduce(t)",
				"gorun: hang: no rank is stuck in Python, but the ranks wait in different places: collectives called in a different order on some ranks, or one that some ranks skipped",
				"gorun: hang: node0 rank 1 also has a thread the other ranks lack, at hang_gil.py:6 ctypes.PyDLL(None).sleep(3600), outside any collective: " +
					"a C call there that holds the GIL (ctypes, an extension that does not release it) keeps its rank from leaving its collective",
			},
			stack: "gorun: hang: node0 rank 1, thread 0x00007f9f56e032c0, by faulthandler (most recent call first):",
		},
		{
			name: "a thread every rank has is nobody's culprit",
			ranks: ranksOf(3, 3, func(r int) *pystack.Dump {
				return realDump(t, "py311-torch113-gil-r1")
			}),
			want: []string{
				"gorun: hang: waiting: all 3 ranks (0-2 on node0) in all_reduce at hang_gil.py:11 t = torch.ones(4); dist.all_reduce(t)",
				"gorun: hang: no rank is stuck in Python: every rank waits in the same collective, so the cause is below it " +
					"(the network, a GPU, a rank stuck in native code); NCCL's RAS report (NCCL >= 2.24, printed above when there is one) " +
					"names ranks that lag, and --flight-recorder DIR keeps every rank's last collectives",
			},
			stack: "gorun: hang: node0 rank 0, thread 0x00007f9f56e032c0, by faulthandler (most recent call first):",
		},
		{
			name: "a rank that sent nothing comes first, and is no culprit's stack",
			ranks: ranksOf(4, 2, func(r int) *pystack.Dump {
				if r == 3 {
					return nil
				}
				return reduce
			}),
			want: []string{
				"gorun: hang: no stacks: node1 rank 3 (sent no stacks in time)",
				"gorun: hang: waiting: node0 rank 0, node0 rank 1, node1 rank 2 in all_reduce at hang.py:6 t = torch.ones(4); dist.all_reduce(t)",
			},
		},
		{
			name: "DDP: the others wait in backward",
			ranks: ranksOf(3, 1, func(r int) *pystack.Dump {
				return realDump(t, fmt.Sprintf("py311-torch113-ddp-r%d", r))
			}),
			want: []string{
				"gorun: hang: stuck: node1 rank 1 at scen.py:18 time.sleep(3600) — not in a collective",
				"gorun: hang: waiting: node0 rank 0, node2 rank 2 in backward at scen.py:20 m(torch.ones(2, 4)).sum().backward() (DDP and FSDP reduce gradients there)",
			},
			stack: "gorun: hang: node1 rank 1, thread 0x00007fd450e7b040, by faulthandler (most recent call first):",
		},
		{
			name: "1,000 ranks on 125 nodes, rank 615 sleeps",
			ranks: ranksOf(1000, 8, func(r int) *pystack.Dump {
				if r == 615 {
					return stuck
				}
				return reduce
			}),
			want: []string{
				"gorun: hang: stuck: node76 rank 615 at hang.py:5 time.sleep(3600) — not in a collective",
				"gorun: hang: waiting: 999 ranks (0-614,616-999 on node[0-124]) in all_reduce at hang.py:6 t = torch.ones(4); dist.all_reduce(t)",
			},
			stack: "gorun: hang: node76 rank 615, thread 0x00007f26c81ec040, by faulthandler (most recent call first):",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			console, lines := renderHang(groupHang(tt.ranks), len(tt.ranks), tt.lagging)
			got := strings.Split(strings.TrimSuffix(console, "\n"), "\n")
			if len(got) < len(tt.want) {
				t.Fatalf("console:\n%s", console)
			}
			for i, w := range tt.want {
				if got[i] != w {
					t.Errorf("line %d\n got %s\nwant %s", i, got[i], w)
				}
			}
			rest := got[len(tt.want):]
			if tt.stack == "" && len(rest) > 0 && !strings.HasPrefix(rest[0], "gorun: hang: node") {
				t.Errorf("more lines than wanted:\n%s", console)
			}
			if tt.stack != "" && (len(rest) == 0 || rest[0] != tt.stack) {
				t.Errorf("stack header\n got %q\nwant %q\n%s", rest, tt.stack, console)
			}
			if len(lines) != len(tt.want) {
				t.Errorf("summary lines = %q, want %d", lines, len(tt.want))
			}
			if n := strings.Count(console, "\n"); n > 20 {
				t.Errorf("%d console lines for %d ranks, want at most 20:\n%s", n, len(tt.ranks), console)
			}
		})
	}
}

// TestHangCulpritStack: the culprit's speaking thread, with source, and
// cut on the console when deep.
func TestHangCulpritStack(t *testing.T) {
	console, _ := renderHang(groupHang(ranksOf(3, 3, func(r int) *pystack.Dump {
		return realDump(t, fmt.Sprintf("py311-torch113-recurse-r%d", r))
	})), 3, nil)
	for _, want := range []string{
		"gorun: hang: stuck: node0 rank 0 at scen.py:32 time.sleep(3600) — not in a collective\n",
		"gorun:     File \"/tmp/dumps/scen.py\", line 32 in <module>\n",
		"gorun:       time.sleep(3600)\n",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
	// The deep ranks are not the culprit: their 100 frames stay off the
	// console.
	if strings.Count(console, "File ") != 1 {
		t.Errorf("console shows more than the culprit's stack:\n%s", console)
	}
	one := groupHang(ranksOf(1, 1, func(int) *pystack.Dump { return realDump(t, "py311-torch113-recurse-r1") }))
	console, _ = renderHang(one, 1, nil)
	if strings.Count(console, "File ") != maxConsoleFrames || !strings.Contains(console, "… 70 more frames") {
		t.Errorf("a deep stack is not cut at %d frames:\n%s", maxConsoleFrames, console)
	}
}

// TestHangManyPlaces: past maxHangLines places the console counts the
// rest; the summary has every line.
func TestHangManyPlaces(t *testing.T) {
	var ranks []RankStacks
	for r := range 15 {
		d := pystack.Dump{Tool: pystack.ToolFaulthandler, Threads: []pystack.Thread{{ID: "0x1",
			Frames: []pystack.Frame{{File: "/w/train.py", Line: 100 + r, Func: "f"}}}}}
		ranks = append(ranks, RankStacks{Node: "n", Rank: r, Dump: &d})
	}
	console, lines := renderHang(groupHang(ranks), len(ranks), nil)
	if len(lines) != 15 || !strings.Contains(console, "gorun: hang: and 5 more places of 5 ranks (in the summary file below)\n") {
		t.Errorf("%d lines; console:\n%s", len(lines), console)
	}
}

func TestCompressRanks(t *testing.T) {
	tests := []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{5, 0, 1, 2, 3}, "0-3,5"},
		{[]int{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, "0,2,4,6,8,10,12,14,…(+2)"},
		{[]int{-1, 4, -1, 4}, "4,2 of unknown rank"},
	}
	for _, tt := range tests {
		if got := compressRanks(tt.in); got != tt.want {
			t.Errorf("compressRanks(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestHangStackEscaped: a frame's file, function and source line come from
// the node and are quoted with their control characters escaped.
func TestHangStackEscaped(t *testing.T) {
	d := &pystack.Dump{Tool: "faulthandler", Threads: []pystack.Thread{{ID: "0x1", Frames: []pystack.Frame{
		{File: "evil\x1b[2J.py", Line: 3, Func: "f\x07", Source: "x = '\x1b]0;title\x07'"}}}}}
	var b strings.Builder
	writeStack(&b, RankStacks{Node: "node1", Rank: 0, LocalRank: 0, Dump: d})
	got := b.String()
	if strings.ContainsAny(got, "\x1b\x07") || !strings.Contains(got, `evil\x1b[2J.py`) || !strings.Contains(got, `x = '\x1b]0;title\x07'`) {
		t.Fatalf("stack lines not escaped: %q", got)
	}
}
