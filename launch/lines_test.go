package launch

import (
	"github.com/gorun/gorun/internal/wire"

	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// prefixed writes chunks to one stream of node1 and returns what reached Out.
func prefixed(t testing.TB, color bool, chunks ...string) string {
	t.Helper()
	s := newSink(nil)
	var out bytes.Buffer
	w := newLineWriter(newNodeLog("node1", 0, color, false), s, &out)
	for _, c := range chunks {
		if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", c, n, err)
		}
	}
	w.close()
	s.close()
	return out.String()
}

func TestLineWriter(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   string
	}{
		{"one line", []string{"hello\n"}, "[node1] hello\n"},
		{"torchrun worker prefix", []string{"[default0]:hello\n"}, "[node1 0] hello\n"},
		{"worker prefix keeps content spacing", []string{"[default3]:  indented\n"}, "[node1 3]   indented\n"},
		{"role with digits in rank", []string{"[trainer12]:x\n"}, "[node1 12] x\n"},
		{"role with punctuation", []string{"[my_role-a.b7]:x\n"}, "[node1 7] x\n"},
		{"empty worker line", []string{"[default1]:\n"}, "[node1 1] \n"},
		{"partial across writes", []string{"hel", "lo wor", "ld\nsecond", " line\n"},
			"[node1] hello world\n[node1] second line\n"},
		{"prefix split across writes", []string{"[defa", "ult5]", ":split\n"}, "[node1 5] split\n"},
		{"many lines in one write", []string{"[default0]:a\n[default1]:b\nc\n"},
			"[node1 0] a\n[node1 1] b\n[node1] c\n"},
		{"CRLF", []string{"a\r\n[default2]:b\r", "\n"}, "[node1] a\n[node1 2] b\n"},
		{"lone CR kept", []string{"50%\r100%\n"}, "[node1] 50%\r100%\n"},
		{"partial last line flushed", []string{"no newline"}, "[node1] no newline\n"},
		{"partial worker line flushed", []string{"[default0]:tail"}, "[node1 0] tail\n"},
		{"empty lines", []string{"\n\n"}, "[node1] \n[node1] \n"},
		{"nothing", nil, ""},
		{"look-alike: no rank", []string{"[default]:x\n"}, "[node1] [default]:x\n"},
		{"look-alike: empty brackets", []string{"[]:x\n"}, "[node1] []:x\n"},
		{"look-alike: no role", []string{"[0]:x\n"}, "[node1] [0]:x\n"},
		{"look-alike: no colon", []string{"[default0] x\n"}, "[node1] [default0] x\n"},
		{"look-alike: space inside", []string{"[de fault0]:x\n"}, "[node1] [de fault0]:x\n"},
		{"look-alike: leading zero", []string{"[default01]:x\n"}, "[node1] [default01]:x\n"},
		{"look-alike: not at start", []string{" [default0]:x\n"}, "[node1]  [default0]:x\n"},
		{"look-alike: glog line", []string{"[W501 12:00:00 socket.cpp:752] x\n"}, "[node1] [W501 12:00:00 socket.cpp:752] x\n"},
		{"look-alike: unclosed", []string{"[default0\n"}, "[node1] [default0\n"},
		{"look-alike: huge rank", []string{"[r1234567]:x\n"}, "[node1] [r1234567]:x\n"},
		{"prefix only once", []string{"[default0]:[default1]:x\n"}, "[node1 0] [default1]:x\n"},
		{"UTF-8", []string{"[default0]:héllo ✓\n"}, "[node1 0] héllo ✓\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := prefixed(t, false, tt.chunks...); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestLineWriterColor(t *testing.T) {
	got := prefixed(t, true, "[default0]:a\nb\n")
	want := "\x1b[36m[node1 0]\x1b[0m a\n\x1b[36m[node1]\x1b[0m b\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if a, b := newNodeLog("a", 0, true, false).color, newNodeLog("b", 1, true, false).color; a == b {
		t.Errorf("nodes 0 and 1 share colour %q", a)
	}
}

func TestLineWriterLongLines(t *testing.T) {
	long := strings.Repeat("x", maxLine*2+10)
	tests := []struct {
		name   string
		chunks []string
		want   []string // output lines, prefix and all
	}{
		{"long worker line in one write", []string{"[default2]:" + long + "\n"},
			[]string{"[node1 2] " + long[:maxLine-11], "[node1 2]+ " + long[:maxLine], "[node1 2]+ " + long[:21]}},
		{"long line byte by byte chunks", chunksOf(long+"\nnext\n", 1000),
			[]string{"[node1] " + long[:maxLine], "[node1]+ " + long[:maxLine], "[node1]+ " + long[:10], "[node1] next"}},
		{"exactly maxLine", []string{long[:maxLine] + "\n"}, []string{"[node1] " + long[:maxLine]}},
		{"long then cut exactly at newline", []string{long[:maxLine+1], "\n"},
			[]string{"[node1] " + long[:maxLine], "[node1]+ x"}},
		{"long partial flushed at close", []string{long},
			[]string{"[node1] " + long[:maxLine], "[node1]+ " + long[:maxLine], "[node1]+ " + long[:10]}},
		{"CRLF at the cut", []string{long[:maxLine] + "\r", "\n"}, []string{"[node1] " + long[:maxLine]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Split(strings.TrimSuffix(prefixed(t, false, tt.chunks...), "\n"), "\n")
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines (lengths %v), want %d", len(got), lens(got), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d: got %d bytes %.40q, want %d bytes %.40q", i, len(got[i]), got[i], len(tt.want[i]), tt.want[i])
				}
			}
		})
	}
}

func TestLineWriterLongUTF8(t *testing.T) {
	// 3-byte runes never fall on the 64 KiB boundary, so the cut must back off.
	long := strings.Repeat("✓", maxLine/3+5)
	out := prefixed(t, false, long+"\n")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines", len(lines))
	}
	joined := strings.TrimPrefix(lines[0], "[node1] ") + strings.TrimPrefix(lines[1], "[node1]+ ")
	if joined != long {
		t.Errorf("pieces do not join back into the line")
	}
	for i, l := range lines {
		if !utf8Valid(l) {
			t.Errorf("line %d is not valid UTF-8", i)
		}
	}
}

// TestLineWriterConcurrent runs many streams at once (run with -race): every
// line must come out whole, once, and in order within its stream.
func TestLineWriterConcurrent(t *testing.T) {
	const streams, lines = 16, 500
	s := newSink(nil)
	var out bytes.Buffer
	var wg sync.WaitGroup
	for i := range streams {
		w := newLineWriter(newNodeLog(fmt.Sprintf("n%d", i), i, false, false), s, &out)
		wg.Go(func() {
			var buf []byte
			for j := range lines {
				buf = fmt.Appendf(buf, "[default%d]:line %d of stream %d %s\n", j%8, j, i, strings.Repeat("p", j%97+1))
				// Write in ragged pieces so lines straddle writes.
				for len(buf) > 13 {
					w.Write(buf[:13])
					buf = buf[13:]
				}
			}
			w.Write(buf)
			w.close()
		})
	}
	wg.Wait()
	s.close()
	next := make([]int, streams)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var node, rank, j, i int
		var pad string
		if _, err := fmt.Sscanf(l, "[n%d %d] line %d of stream %d %s", &node, &rank, &j, &i, &pad); err != nil {
			t.Fatalf("mangled line %q: %v", l, err)
		}
		if node != i || rank != j%8 || j != next[i] || len(pad) != j%97+1 {
			t.Fatalf("line %q out of place (want line %d of stream %d)", l, next[i], i)
		}
		next[i]++
	}
	for i, n := range next {
		if n != lines {
			t.Errorf("stream %d: %d lines, want %d", i, n, lines)
		}
	}
}

func TestLineWriterAfterClose(t *testing.T) {
	s := newSink(nil)
	var out bytes.Buffer
	w := newLineWriter(newNodeLog("node1", 0, false, false), s, &out)
	w.Write([]byte("a\n"))
	w.close()
	if n, err := w.Write([]byte("late\n")); n != 5 || err != nil {
		t.Errorf("Write after close = %d, %v", n, err)
	}
	s.close()
	if out.String() != "[node1] a\n" {
		t.Errorf("got %q", out.String())
	}
}

func TestNodeLogTail(t *testing.T) {
	s := newSink(nil)
	l := newNodeLog("node1", 0, true, false)
	w := newLineWriter(l, s, &bytes.Buffer{})
	for i := range tailLines + 5 {
		fmt.Fprintf(w, "[default%d]:line %d\n", i%2, i)
	}
	fmt.Fprintf(w, "%s\n", strings.Repeat("é", tailLineBytes))
	w.close()
	s.close()
	got := l.lastLines()
	if len(got) != tailLines {
		t.Fatalf("kept %d lines, want %d", len(got), tailLines)
	}
	if got[0] != "[node1 0] line 6" || got[tailLines-2] != "[node1 0] line 24" {
		t.Errorf("tail = %q … %q", got[0], got[tailLines-2])
	}
	last := got[tailLines-1]
	if !strings.HasSuffix(last, "…") || len(last) > tailLineBytes+20 || !utf8Valid(last) {
		t.Errorf("long line kept as %d bytes %.30q", len(last), last)
	}
}

func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("[default0]:hello\nworld\r\n[x1]:"), uint8(3))
	f.Add([]byte("[trainer12]:a\n\n[0]:b"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		n := int(step%32) + 1
		var chunks []string
		for d := data; len(d) > 0; {
			k := min(n, len(d))
			chunks = append(chunks, string(d[:k]))
			d = d[k:]
		}
		out := prefixed(t, false, chunks...)
		want := strings.Count(string(data), "\n")
		if len(data) > 0 && data[len(data)-1] != '\n' {
			want++
		}
		if got := strings.Count(out, "\n"); got != want {
			t.Fatalf("%d lines out for %d in", got, want)
		}
		if out == "" {
			return
		}
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if !strings.HasPrefix(l, "[node1") {
				t.Fatalf("line without prefix: %q", l)
			}
		}
	})
}

// BenchmarkPrefixer pushes typical torchrun lines through 8 streams (four
// nodes' stdout and stderr) at once and reports lines per second, with 64
// lines per Write (a busy pipe) and one (a line-buffered trickle, the worst
// case: one hand-off to the writer goroutine per line). Every line that
// reaches Out is checked to be whole and prefixed.
func BenchmarkPrefixer(b *testing.B) {
	for _, perWrite := range []int{64, 1} {
		b.Run(fmt.Sprintf("lines-per-write=%d", perWrite), func(b *testing.B) {
			const streams = 8
			var chunk []byte
			for i := range perWrite {
				chunk = fmt.Appendf(chunk, "[default%d]:step %d loss 2.3456 lr 3.0e-04 tokens/s 123456.7 grad_norm 0.98\n", i%8, i)
			}
			s := newSink(nil)
			out := &checkWriter{}
			ws := make([]*lineWriter, streams)
			for i := range ws {
				ws[i] = newLineWriter(newNodeLog(fmt.Sprintf("node%d", i/2), i/2, false, false), s, out)
			}
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N/streams + 1
			for _, w := range ws {
				wg.Go(func() {
					for range per {
						w.Write(chunk)
					}
				})
			}
			wg.Wait()
			for _, w := range ws {
				w.close()
			}
			s.close()
			b.StopTimer()
			lines := per * streams * perWrite
			if out.lines != lines || out.bad != 0 {
				b.Fatalf("%d lines out (%d mangled), want %d", out.lines, out.bad, lines)
			}
			b.ReportMetric(float64(lines)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}

// checkWriter counts lines and those not in the shape the benchmark writes.
type checkWriter struct{ lines, bad int }

func (c *checkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.bad++
			break
		}
		l := p[:i]
		if !bytes.HasPrefix(l, []byte("[node")) || !bytes.HasSuffix(l, []byte(" grad_norm 0.98")) || bytes.Contains(l, []byte("]:")) {
			c.bad++
		}
		c.lines++
		p = p[i+1:]
	}
	return n, nil
}

func chunksOf(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

func lens(ss []string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = len(s)
	}
	return out
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestPlainLinesPassThrough(t *testing.T) {
	var out bytes.Buffer
	s := newSink(nil)
	l := newNodeLog("localhost", 0, true, true)
	w := newLineWriter(l, s, &out)
	w.Write([]byte("[default0]:hello\ntorchrun says"))
	w.Write([]byte(" hi\n"))
	w.close()
	s.close()
	if got, want := out.String(), "[default0]:hello\ntorchrun says hi\n"; got != want {
		t.Fatalf("plain output = %q, want %q", got, want)
	}
	if got := l.lastLines(); len(got) != 2 || got[1] != "[localhost] torchrun says hi" {
		t.Fatalf("last lines = %q", got)
	}
}

// TestPlainLongLinesWhole: in plain mode nothing marks a piece, so a line
// longer than maxLine comes out whole, as torchrun would print it, from a
// worker's stream too; however it was written.
func TestPlainLongLinesWhole(t *testing.T) {
	lines := []string{strings.Repeat("A", 100000), strings.Repeat("B", maxLine), strings.Repeat("C", maxLine+1), "short",
		strings.Repeat("D", maxPlainLine+10)} // past the limit: pieces, joined up
	in := strings.Join(lines, "\n") + "\n"
	for _, chunk := range []int{len(in), 1 << 20, 4096} {
		var out bytes.Buffer
		s := newSink(nil)
		l := newNodeLog("localhost", 0, false, true)
		w := newRankWriter(l, newLineWriter(l, s, &out), wire.WorkerStarted{}, Prefix{}, 1)
		for b := []byte(in); len(b) > 0; {
			n := min(chunk, len(b))
			w.Write(b[:n])
			b = b[n:]
		}
		w.close()
		s.close()
		if out.String() != in {
			t.Errorf("chunks of %d: line lengths %v, want %v", chunk, lens(strings.Split(out.String(), "\n")), lens(strings.Split(in, "\n")))
		}
	}
}
