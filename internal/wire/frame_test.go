package wire

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

func TestFrameDecoderAnyChunking(t *testing.T) {
	var stream []byte
	want := []string{"a:", "b:one", "c:" + strings.Repeat("z", 70000)}
	for _, w := range want {
		stream = AppendFrame(stream, w[0], []byte(w[2:]))
	}
	for _, chunk := range []int{1, 2, 5, 4096, len(stream)} {
		var got []string
		d := NewFrameDecoder(func(kind byte, p []byte) { got = append(got, string(kind)+":"+string(p)) })
		for b := stream; len(b) > 0; {
			n := min(chunk, len(b))
			d.Write(b[:n])
			b = b[n:]
		}
		if d.Err() != nil || len(got) != len(want) {
			t.Fatalf("chunks of %d: err %v, %d frames", chunk, d.Err(), len(got))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("chunks of %d: frame %d = %.20q, want %.20q", chunk, i, got[i], want[i])
			}
		}
	}
	d := NewFrameDecoder(func(byte, []byte) { t.Error("a frame from a corrupt stream") })
	d.Write([]byte{'x', 0xff, 0xff, 0xff, 0xff})
	if d.Err() == nil {
		t.Error("an oversized frame header was not reported")
	}
}

// streamPrefixes are the byte streams of the protocol whose bytes of one kind
// share a reader, named by the prefix of their constants: the agent's
// stdout carries the agent's frames and its relay clients' (Frame*), its
// stdin the head's control bytes (Ctl*), and a relay client's socket what
// the agent tells it (Relay*) and what the head tells through it (Tell*,
// and the size a TellResize is followed by: digits, 'x', ';').
func streamPrefixes() [][]string { return [][]string{{"Frame"}, {"Ctl"}, {"Relay", "Tell"}} }

// TestFrameKindsDistinct reads every constant of this package and fails
// when two on one stream have the same byte: a reader could not tell them
// apart.
func TestFrameKindsDistinct(t *testing.T) {
	kinds, err := streamKinds(".")
	if err != nil {
		t.Fatal(err)
	}
	for i, prefixes := range streamPrefixes() {
		if len(kinds[i]) < 3 {
			t.Errorf("stream %v: only %d kinds found; were they renamed?", prefixes, len(kinds[i]))
		}
		if err := distinct(kinds[i]); err != nil {
			t.Errorf("stream %v: %v", prefixes, err)
		}
	}
	if err := distinct(append(kinds[2], resizeBytes()...)); err != nil {
		t.Errorf("a TellResize's size: %v", err)
	}
}

// TestDistinctCatchesCollisions: the check above fails when two kinds
// collide.
func TestDistinctCatchesCollisions(t *testing.T) {
	if distinct([]kind{{"FrameA", 'a'}, {"FrameB", 'b'}}) != nil {
		t.Error("distinct kinds reported as colliding")
	}
	err := distinct([]kind{{"FrameA", 'a'}, {"FrameB", 'b'}, {"FrameC", 'a'}})
	if err == nil || !strings.Contains(err.Error(), "FrameA") || !strings.Contains(err.Error(), "FrameC") {
		t.Errorf("a collision: %v", err)
	}
}

type kind struct {
	name string
	b    byte
}

func distinct(kinds []kind) error {
	seen := map[byte]string{}
	var errs []string
	for _, k := range kinds {
		if other, ok := seen[k.b]; ok {
			errs = append(errs, other+" and "+k.name+" are both "+strconv.QuoteRune(rune(k.b)))
			continue
		}
		seen[k.b] = k.name
	}
	if errs != nil {
		return errorString(strings.Join(errs, "; "))
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

func resizeBytes() []kind {
	ks := []kind{{"TellResize's x", 'x'}, {"TellResize's ;", ';'}}
	for c := byte('0'); c <= '9'; c++ {
		ks = append(ks, kind{"TellResize's digit", c})
	}
	return ks
}

// streamKinds reads the byte constants of the package in dir, each a
// character literal, and sorts them by stream (streamPrefixes).
func streamKinds(dir string) ([][]kind, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, nil, 0)
	if err != nil {
		return nil, err
	}
	kinds := make([][]kind, len(streamPrefixes()))
	for name, pkg := range pkgs {
		if strings.HasSuffix(name, "_test") {
			continue
		}
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, id := range vs.Names {
						stream := streamOf(id.Name)
						if stream < 0 || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.CHAR {
							continue // not a kind byte (FrameHeader, MaxFrame)
						}
						r, _, _, err := strconv.UnquoteChar(lit.Value[1:len(lit.Value)-1], '\'')
						if err != nil {
							return nil, err
						}
						kinds[stream] = append(kinds[stream], kind{id.Name, byte(r)})
					}
				}
			}
		}
	}
	return kinds, nil
}

func streamOf(name string) int {
	for i, prefixes := range streamPrefixes() {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return i
			}
		}
	}
	return -1
}

func TestReadLine(t *testing.T) {
	tests := []struct {
		name, in string
		limit    int
		want     string
		wantErr  bool
	}{
		{name: "line", in: "{}\nh", limit: 10, want: "{}"},
		{name: "empty", in: "\n", limit: 10, want: ""},
		{name: "no newline", in: "{}", limit: 10, wantErr: true},
		{name: "too long", in: strings.Repeat("x", 20) + "\n", limit: 10, wantErr: true},
		{name: "longer than buffer", in: strings.Repeat("y", 10000) + "\n", limit: 20000, want: strings.Repeat("y", 10000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
			got, err := ReadLine(br, tc.limit)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Errorf("line = %q, want %q", got, tc.want)
			}
		})
	}
}
