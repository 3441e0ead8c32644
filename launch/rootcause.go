package launch

import (
	"bytes"
	"strconv"
)

// rootCause is what torchrun's ChildFailedError summary says about the first
// worker that failed. torchrun prints it on its own stderr (not through a
// worker prefix) in this shape:
//
//	Root Cause (first observed failure):
//	[0]:
//	  time      : 2024-05-01_12:00:00
//	  host      : node1
//	  rank      : 3 (local_rank: 1)
//	  exitcode  : 7 (pid: 1234)
//	  error_file: <N/A>
//	  traceback : To enable traceback see: ...
//	============================================================
type rootCause struct {
	Host      string
	Rank      int
	LocalRank int
	ExitCode  int
	PID       int
}

// causeParser reads torchrun's own lines one at a time and remembers the last
// complete Root Cause block. It is fed line by line, rather than given the
// node's tail afterwards, because a long traceback in the "Failures" section
// can push the block out of any fixed window of last lines.
type causeParser struct {
	state  causeState
	cur    rootCause
	fields int // bit set of fields seen in cur
	found  bool
	last   rootCause
}

type causeState uint8

const (
	causeIdle   causeState = iota
	causeHeader            // saw "Root Cause ...", expect "[0]:"
	causeFields            // inside the block
)

const (
	fieldRank = 1 << iota
	fieldExit
)

var (
	rootCauseTitle = []byte("Root Cause")
	borderPrefix   = []byte("====")
)

// feed reads one line (without its newline).
func (p *causeParser) feed(line []byte) {
	t := bytes.TrimSpace(line)
	switch p.state {
	case causeIdle:
		if bytes.HasPrefix(t, rootCauseTitle) {
			p.state = causeHeader
		}
	case causeHeader:
		if len(t) >= 3 && t[0] == '[' && bytes.HasSuffix(t, []byte("]:")) {
			p.state = causeFields
			p.cur = rootCause{Rank: -1, LocalRank: -1, ExitCode: 0, PID: -1}
			p.fields = 0
			return
		}
		p.state = causeIdle
		p.feed(line) // may itself start a new block
	case causeFields:
		key, val, ok := bytes.Cut(t, []byte(":"))
		key = bytes.TrimSpace(key)
		if !ok || bytes.HasPrefix(t, borderPrefix) || string(key) == "traceback" {
			p.finish()
			if !ok && !bytes.HasPrefix(t, borderPrefix) {
				p.feed(line)
			}
			return
		}
		val = bytes.TrimSpace(val)
		switch string(key) {
		case "host":
			p.cur.Host = string(val)
		case "rank":
			if n, ok := leadingInt(val); ok {
				p.cur.Rank = n
				p.fields |= fieldRank
			}
			if n, ok := intAfter(val, "local_rank:"); ok {
				p.cur.LocalRank = n
			}
		case "exitcode":
			if n, ok := leadingInt(val); ok {
				p.cur.ExitCode = n
				p.fields |= fieldExit
			}
			if n, ok := intAfter(val, "pid:"); ok {
				p.cur.PID = n
			}
		}
	}
}

// finish ends the current block, keeping it when it named a rank and a code.
func (p *causeParser) finish() {
	if p.fields&(fieldRank|fieldExit) == fieldRank|fieldExit {
		p.last, p.found = p.cur, true
	}
	p.state = causeIdle
}

// result returns the last complete block seen; a block cut off by the end of
// the output counts when it already named a rank and a code.
func (p *causeParser) result() (rootCause, bool) {
	if p.state == causeFields && p.fields&(fieldRank|fieldExit) == fieldRank|fieldExit {
		return p.cur, true
	}
	return p.last, p.found
}

// parseRootCause finds the last Root Cause block in a node's raw output.
func parseRootCause(text []byte) (rootCause, bool) {
	var p causeParser
	for len(text) > 0 {
		line, rest, _ := bytes.Cut(text, []byte("\n"))
		p.feed(line)
		text = rest
	}
	return p.result()
}

// leadingInt parses the optionally signed integer at the start of b.
func leadingInt(b []byte) (int, bool) {
	end := 0
	if end < len(b) && (b[end] == '-' || b[end] == '+') {
		end++
	}
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(string(b[:end]))
	return n, err == nil
}

// intAfter parses the integer that follows label in b ("(pid: 1234)").
func intAfter(b []byte, label string) (int, bool) {
	i := bytes.Index(b, []byte(label))
	if i < 0 {
		return 0, false
	}
	return leadingInt(bytes.TrimLeft(b[i+len(label):], " "))
}
