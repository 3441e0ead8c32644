package hosts

import "fmt"

// Alike gathers the hosts that get the same notice, so that a notice
// about a thousand nodes takes a handful of lines: the first Show hosts of
// each notice are said at once (Add reports true), and the rest are named
// in one line by Flush. The caller owns it and serialises its use.
type Alike struct {
	Show   int
	shapes map[string]*alike
	order  []*alike // the notices in the order they first came
}

type alike struct {
	text string // what Flush quotes: the first host's
	n    int    // hosts added
	more []string
}

// Add counts host for the notice of the given shape (its text with what
// names the host taken out, or the text itself where it names none) and
// reports whether host is among its first Show: then the host's own line
// is to be said now. text is what Flush quotes: the first host's.
func (a *Alike) Add(host, shape, text string) bool {
	if a.shapes == nil {
		a.shapes = map[string]*alike{}
	}
	g := a.shapes[shape]
	if g == nil {
		g = &alike{text: text}
		a.shapes[shape] = g
		a.order = append(a.order, g)
	}
	g.n++
	if g.n <= a.Show {
		return true
	}
	g.more = append(g.more, host)
	return false
}

// Flush returns one line for each notice that hosts were gathered for
// since the last Flush, in the order the notices first came: "992 more
// nodes alike (node[8-999]): TEXT".
func (a *Alike) Flush() []string {
	var lines []string
	for _, g := range a.order {
		if len(g.more) == 0 {
			continue
		}
		noun := "nodes"
		if len(g.more) == 1 {
			noun = "node"
		}
		lines = append(lines, fmt.Sprintf("%d more %s alike (%s): %s", len(g.more), noun, Compress(g.more), g.text))
		g.more = nil
	}
	return lines
}
