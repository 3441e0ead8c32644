package launch

import (
	"fmt"

	"github.com/gorun/gorun/hosts"
)

// collapseNotices is how many nodes get a notice about themselves in a line
// of their own; past them, the nodes with the same notice are gathered and
// named in one line (as sshexec does for its per-node dial notices), so a
// run on a thousand nodes that all start cold prints a handful of lines.
const collapseNotices = 8

// nodeNotices says each notice about a node once per run ("gorun: NODE:
// TEXT"), the first collapseNotices nodes of the same TEXT one line each,
// and the rest in one line at flush. The supervisor's goroutine alone uses
// it.
type nodeNotices struct {
	said   map[string]bool // node + "\x00" + kind: said, or gathered to be
	shapes map[string]*gathered
	order  []*gathered // the texts in the order they were first noted
}

// gathered is one notice's text and the nodes past collapseNotices that
// have it, waiting for flush.
type gathered struct {
	text string
	n    int // nodes noted, said or gathered
	more []string
}

func newNodeNotices() *nodeNotices {
	return &nodeNotices{said: map[string]bool{}, shapes: map[string]*gathered{}}
}

// note returns the line to print now for text about node: "" when node
// had it already, or when it is gathered for flush.
func (nn *nodeNotices) note(node, text string) string {
	return nn.noteOnce(node, text, text)
}

// noteOnce is note for the first text of its kind about node: a later
// one of the same kind about node is not said.
func (nn *nodeNotices) noteOnce(node, kind, text string) string {
	key := node + "\x00" + kind
	if nn.said[key] {
		return ""
	}
	nn.said[key] = true
	g := nn.shapes[text]
	if g == nil {
		g = &gathered{text: text}
		nn.shapes[text] = g
		nn.order = append(nn.order, g)
	}
	g.n++
	if g.n > collapseNotices {
		g.more = append(g.more, node)
		return ""
	}
	return fmt.Sprintf("gorun: %s: %s\n", node, text)
}

// flush returns one line for each text that nodes were gathered for since
// the last flush, naming them: "gorun: 992 more nodes alike
// (node[8-999]): TEXT".
func (nn *nodeNotices) flush() string {
	var out string
	for _, g := range nn.order {
		if len(g.more) == 0 {
			continue
		}
		out += fmt.Sprintf("gorun: %s alike (%s): %s\n", plural(len(g.more), "more node"), hosts.Compress(g.more), g.text)
		g.more = nil
	}
	return out
}
