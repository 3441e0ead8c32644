package wire

import "fmt"

// Protocol is the version of this protocol: the head puts it in every job
// line (Job.Protocol) and the agent compares it with its own
// before it starts anything. The head uploads its own binary to the nodes,
// so the two differ only where --remote-gorun names a gorun built from
// another version, whose frames, control bytes or variables could be
// misread in ways no later check would catch. Raise it with every change
// that a gorun of the previous version would not understand. A job line
// without a version comes from a gorun older than the check (0).
//
//	1: the check itself
//	2: each worker's supervisor reads its steps (StepsVar, FrameStep)
const Protocol = 2

// ProtocolMismatch is the one line an agent of version agent says, and
// stops, when the head that sent its job speaks version head.
func ProtocolMismatch(head, agent int) string {
	return fmt.Sprintf("this gorun on the node speaks protocol %d and the head's gorun protocol %d: "+
		"run the same gorun on the head and the nodes (--remote-gorun names a gorun of another version; "+
		"leave it out and the head uploads its own)", agent, head)
}
