// Package pystack reads a Python process's stacks as the two dumpers gorun
// uses print them, and says where the process is: waiting in a collective
// of torch.distributed, or somewhere else, at a line of the user's code.
//
// It owns three pure steps, each table-tested on real dumps (testdata):
//
//   - reading a dump (faulthandler.go: the text CPython's faulthandler
//     writes on a fatal signal, from Python 3.8 to 3.14; pyspy.go: the JSON
//     `py-spy dump --json` prints) into a Dump of threads and frames,
//     innermost frame first;
//   - filling in each frame's source line (source.go), through a reader
//     the caller gives: the worker's supervisor on the node, where the
//     files are (internal/rank);
//   - placing the dump (place.go): which thread speaks for the process,
//     whether it waits in a collective (torch.distributed, DDP, autograd's
//     backward, NCCL or gloo frames innermost before any user frame), and
//     its innermost frame in user code (not in site-packages,
//     dist-packages or the standard library).
//
// Grouping the ranks of a job by place, and printing that, is the head's
// (launch/culprit.go). pystack does no I/O of its own, starts no
// goroutine, keeps no state and is safe for concurrent use.
package pystack
