package pystack

import (
	"bufio"
	"io"
	"strings"
	"unicode/utf8"
)

// Limits of AddSource: a dump of 100 threads of 100 frames reads each
// file once, and no more than this.
const (
	maxSourceFiles = 64       // distinct files read
	maxSourceBytes = 16 << 20 // read of one file
	maxSourceLine  = 200      // bytes of one line kept
)

// AddSource fills in the Source of every frame whose file open can read:
// the text of that line, trimmed, cut at 200 bytes. Names in angle
// brackets ("<frozen runpy>", "<string>") are not files and are skipped,
// and so are native frames (py-spy --native: shared objects, no line). A
// relative name is read as open reads it, so open should resolve it where
// the process ran. Each file is read once, up to its last line asked for;
// at most 64 files are read.
func AddSource(d *Dump, open func(name string) (io.ReadCloser, error)) {
	want := map[string]map[int]string{}
	var order []string
	for _, t := range d.Threads {
		for _, f := range t.Frames {
			if f.Line <= 0 || f.File == "" || f.Native || strings.HasPrefix(f.File, "<") {
				continue
			}
			if want[f.File] == nil {
				if len(order) == maxSourceFiles {
					continue
				}
				want[f.File] = map[int]string{}
				order = append(order, f.File)
			}
			want[f.File][f.Line] = ""
		}
	}
	for _, name := range order {
		readLines(open, name, want[name])
	}
	for i := range d.Threads {
		for j := range d.Threads[i].Frames {
			f := &d.Threads[i].Frames[j]
			if lines := want[f.File]; lines != nil {
				f.Source = lines[f.Line]
			}
		}
	}
}

// readLines fills lines (line number to text) from the file name.
func readLines(open func(string) (io.ReadCloser, error), name string, lines map[int]string) {
	rc, err := open(name)
	if err != nil {
		return
	}
	defer rc.Close()
	last := 0
	for n := range lines {
		last = max(last, n)
	}
	br := bufio.NewReader(io.LimitReader(rc, maxSourceBytes))
	for n := 1; n <= last; n++ {
		l, err := br.ReadString('\n')
		if _, ok := lines[n]; ok {
			lines[n] = cleanSource(l)
		}
		if err != nil {
			return
		}
	}
}

// cleanSource trims a source line and keeps it short and valid UTF-8.
func cleanSource(l string) string {
	l = strings.TrimSpace(strings.ToValidUTF8(l, "\uFFFD"))
	if len(l) <= maxSourceLine {
		return l
	}
	l = l[:maxSourceLine]
	for !utf8.ValidString(l) {
		l = l[:len(l)-1]
	}
	return l + "…"
}
