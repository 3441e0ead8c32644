// Package fleet is the head's side of preflight: it asks every node's
// agent over sshexec for its facts (wire.CollectCommand, answered by
// preflight's collector on the node), checks each node's with
// preflight.Check, gathers the reports with the checks across nodes and
// the head's own lints into one preflight.Report, and, for `--bandwidth
// all`, measures all_reduce across pairs of nodes from the head
// (wire.BandwidthCommand on both nodes of a pair). It runs on the head
// only; the nodes never import it, so that what they link of preflight
// stays free of sshexec.
//
// One file per idea: run.go is Run, the fan-out over the nodes with each
// node's time limit; cross.go is the ring of node pairs measured across.
// The judging of what comes back (Check, CheckAcross, CheckCross, the
// lints) is preflight's and pure.
//
// Run blocks until every node has answered, failed or timed out (at most
// RunOptions.Fanout asked at once), or until ctx ends; it then returns at
// once with what it has, the nodes it did not reach named in the report.
// Every node gets its own limit (RunOptions.NodeTimeout), so one wedged
// node or SSH session cannot hold the others. Run keeps no state between
// calls; RunOptions.Progress is called one call at a time.
package fleet
