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
	said  map[string]bool // node + "\x00" + kind: said, or gathered to be
	alike hosts.Alike
}

func newNodeNotices() *nodeNotices {
	return &nodeNotices{said: map[string]bool{}, alike: hosts.Alike{Show: collapseNotices}}
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
	if !nn.alike.Add(node, text, text) {
		return ""
	}
	return fmt.Sprintf("gorun: %s: %s\n", node, text)
}

// flush returns one line for each text that nodes were gathered for since
// the last flush, naming them: "gorun: 992 more nodes alike
// (node[8-999]): TEXT".
func (nn *nodeNotices) flush() string {
	var out string
	for _, line := range nn.alike.Flush() {
		out += "gorun: " + line + "\n"
	}
	return out
}
