// Package userr holds the error every gorun package returns for input the
// user can fix (a bad flag, a broken hostfile line, a Slurm variable that
// does not parse), and the rules for showing what the user typed in a
// message.
//
// It owns three things: InputError, whose Error is one line that says what
// is wrong, where, and how to fix it, with control characters escaped so a
// message can never rewrite the terminal it is printed on; Printable, the
// same escaping for messages of several lines; and Echo and Quote, which
// cut a value to MaxEcho runes, so an error never prints a 100k-character
// option back. EditDistance, for "did you mean" suggestions, lives here
// because every parser that refuses a name wants it.
//
// main maps *InputError to exit code 2. userr does no I/O, keeps no state
// and imports nothing of gorun; every function is safe for concurrent use.
package userr
