// Package secret decides what gorun may print of an environment variable or
// a command line: IsSecret says whether a variable's name marks a
// credential, Redact hides such values and the secret parts of any other
// value (URL passwords, ?access_token=, token shapes), and RedactArgs does
// the same for an argv.
//
// Plans, preflight reports, telemetry files and error messages are pasted
// into tickets and kept in logs; the job itself always gets every value
// unchanged. Everything that renders a value a user gave goes through this
// package, so that one rule, which errs towards hiding, holds everywhere.
//
// secret does no I/O and keeps no state; its functions are pure and safe
// for concurrent use.
package secret
