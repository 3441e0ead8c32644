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
	Time      string
	Host      string
	Rank      int
	LocalRank int
	ExitCode  int
	PID       int
}

// causeParser reads torchrun's own lines one at a time and remembers the last
// complete Root Cause block and the "Failures:" entries before it. It is fed
// line by line, rather than given the node's tail afterwards, because a long
// traceback in the "Failures" section can push the block out of any fixed
// window of last lines.
type causeParser struct {
	state   causeState
	inRoot  bool // the entries being read are the Root Cause section's
	cur     rootCause
	fields  int // bit set of fields seen in cur
	found   bool
	last    rootCause
	others  []rootCause // the "Failures:" section's entries
	pending []rootCause // "Failures:" entries of the summary being read
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
	failuresTitle  = []byte("Failures:")
	borderPrefix   = []byte("====")
)

// feed reads one line (without its newline).
func (p *causeParser) feed(line []byte) {
	t := bytes.TrimSpace(line)
	switch p.state {
	case causeIdle:
		switch {
		case bytes.HasPrefix(t, failuresTitle):
			p.state, p.inRoot, p.pending = causeHeader, false, p.pending[:0]
		case bytes.HasPrefix(t, rootCauseTitle):
			p.state, p.inRoot = causeHeader, true
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
		case "time":
			p.cur.Time = string(val)
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

// finish ends the current entry, keeping it when it named a rank and a
// code, and expects another entry of the same section.
func (p *causeParser) finish() {
	if p.fields&(fieldRank|fieldExit) == fieldRank|fieldExit {
		if p.inRoot {
			p.last, p.found = p.cur, true
			p.others = append(p.others[:0], p.pending...)
		} else {
			p.pending = append(p.pending, p.cur)
		}
	}
	p.state = causeHeader
}

// result returns the root cause of the last complete summary; an entry cut
// off by the end of the output counts when it already named a rank and a
// code.
//
// torchrun stamps failures to the second and breaks ties by rank, so when a
// worker crashes and its peers die a moment later of the broken connection
// (a Python exception: exit 1), a peer can be named the root cause. When
// the named worker exited 1 and another failed in the same second with a
// code of its own, that one is the likelier cause and is returned instead.
func (p *causeParser) result() (rootCause, bool) {
	if p.state == causeFields && p.inRoot && p.fields&(fieldRank|fieldExit) == fieldRank|fieldExit {
		return p.cur, true
	}
	if !p.found || p.last.ExitCode != 1 {
		return p.last, p.found
	}
	for _, o := range p.others {
		if o.Time == p.last.Time && o.ExitCode != 1 && o.ExitCode != 0 {
			return o, true
		}
	}
	return p.last, true
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
