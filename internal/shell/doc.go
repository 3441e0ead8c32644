// Package shell holds the one quoting function for anything that reaches a
// shell: commands sent to a node over SSH, and command lines gorun prints
// for a person to paste (dry-run plans, hints in error messages).
//
// There is exactly one, so that what gorun runs and what it shows can never
// disagree on where a word ends. It does no I/O and keeps no state.
package shell
