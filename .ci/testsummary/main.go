// testsummary reads `go test -json` on stdin and prints what a plain
// `go test` would print (the output of failing tests, and each package's
// closing "ok", "FAIL" or "?" line, which CI judges the run by), then every
// skipped test with its reason, so a CI log shows what did not run, and a
// last "FAIL" line when anything failed, as go test ends.
//
//	go test -json ./... | go run ./.ci/testsummary
//
// It exits 1 when a test, a package or a build failed, 2 on bad input.
// Lines that are not JSON (go test's own complaints) are passed through.
// It is not under ./... (directories starting with a dot are left out), so
// .ci/test vets and tests it by name.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// line is one output line of a test still running.
type line struct {
	test, text string
}

// pkgState is what is held for one package until its tests end.
type pkgState struct {
	lines   map[string][]line // by top-level test
	running []string          // top-level tests with lines held, in order of their first
	failed  map[string]bool   // tests (any level) that failed
	skipped []string          // in the order they ended
	reasons map[string]string
}

// summary is the state of one run.
type summary struct {
	out    io.Writer
	pkgs   map[string]*pkgState
	order  []string // packages in order of first event, for the skip list
	failed bool
}

func summarize(in io.Reader, out io.Writer) (failed bool, err error) {
	s := &summary{out: out, pkgs: map[string]*pkgState{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16<<20) // a test may print a long line
	for sc.Scan() {
		b := sc.Bytes()
		var e event
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
			fmt.Fprintf(out, "%s\n", b)
			continue
		}
		s.handle(e)
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	s.printSkips()
	if s.failed {
		// Plain go test ends so when anything failed; -json does not.
		fmt.Fprintln(out, "FAIL")
	}
	return s.failed, nil
}

func (s *summary) pkg(name string) *pkgState {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgState{lines: map[string][]line{}, failed: map[string]bool{}, reasons: map[string]string{}}
		s.pkgs[name] = p
		s.order = append(s.order, name)
	}
	return p
}

func (s *summary) handle(e event) {
	switch e.Action {
	case "build-output":
		io.WriteString(s.out, e.Output)
		return
	case "build-fail":
		s.failed = true
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		s.handlePackage(p, e)
		return
	}
	top, _, _ := strings.Cut(e.Test, "/")
	switch e.Action {
	case "output":
		if !framing(e.Output) {
			if _, ok := p.lines[top]; !ok {
				p.running = append(p.running, top)
			}
			p.lines[top] = append(p.lines[top], line{e.Test, e.Output})
		}
	case "fail":
		p.failed[e.Test] = true
		s.failed = true
	case "skip":
		p.skipped = append(p.skipped, e.Test)
		p.reasons[e.Test] = skipReason(p.lines[top], e.Test)
	}
	if e.Test == top && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
		s.flush(p, top, false)
	}
}

// handlePackage passes a package's own output through, as go test does,
// except the bare "PASS" a passing test binary prints (go test drops it).
func (s *summary) handlePackage(p *pkgState, e event) {
	switch e.Action {
	case "output":
		if strings.HasPrefix(e.Output, "FAIL") {
			s.flushRunning(p) // before the package's closing lines
		}
		if e.Output != "PASS\n" {
			io.WriteString(s.out, e.Output)
		}
	case "fail":
		s.failed = true
		s.flushRunning(p)
	case "pass", "skip":
		p.lines, p.running = map[string][]line{}, nil
	}
}

// flushRunning prints what the tests still running printed: a panic or a
// timeout ended the binary, and their output helps to see where.
func (s *summary) flushRunning(p *pkgState) {
	for _, top := range slices.Clone(p.running) { // flush shortens it
		s.flush(p, top, true)
	}
}

// flush prints the held output of top's failed tests (of all its tests,
// with all), as a plain go test prints a failing test's output, and drops
// the rest.
func (s *summary) flush(p *pkgState, top string, all bool) {
	lines, ok := p.lines[top]
	if !ok {
		return
	}
	for _, l := range lines {
		if all || p.failed[l.test] {
			io.WriteString(s.out, l.text)
		}
	}
	delete(p.lines, top)
	for i, t := range p.running {
		if t == top {
			p.running = append(p.running[:i], p.running[i+1:]...)
			break
		}
	}
}

// framing reports the lines -json adds that a plain go test does not
// print: a test's start, pause, continue and name markers.
func framing(out string) bool {
	t := strings.TrimLeft(out, " ")
	for _, p := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// skipReason is what test printed (its t.Skip message, with the file and
// line) in one line, without the "--- SKIP" line itself.
func skipReason(lines []line, test string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l.text)
		if l.test != test || t == "" || strings.HasPrefix(t, "--- SKIP: ") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

func (s *summary) printSkips() {
	n := 0
	for _, p := range s.pkgs {
		n += len(p.skipped)
	}
	fmt.Fprintf(s.out, "== skipped tests: %d\n", n)
	for _, name := range s.order {
		p := s.pkgs[name]
		for _, t := range p.skipped {
			fmt.Fprintf(s.out, "SKIP %s %s: %s\n", name, t, p.reasons[t])
		}
	}
}
