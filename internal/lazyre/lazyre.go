// Package lazyre compiles a regular expression on its first use, not when
// the program starts: gorun starts as a short-lived helper on every node
// and for every worker (`gorun _rank`, `_collect`, `_gpufree`), and
// compiling every package's patterns at start-up cost each of those about
// 2 ms of CPU for patterns most of them never use.
package lazyre

import (
	"regexp"
	"sync"
)

// New returns a function that compiles expr on its first call, panicking
// as regexp.MustCompile does on a bad pattern, and returns the same
// *regexp.Regexp on every call. It is safe for concurrent use.
func New(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
