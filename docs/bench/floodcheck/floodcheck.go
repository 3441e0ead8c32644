//go:build ignore

// floodcheck is the reader of docs/bench/output-flood.sh. It reads the lines
// of docs/bench/flood_worker.py, through gorun or straight from the workers,
// timestamps each as it arrives, and checks that every line came whole, once
// and in order.
//
//	floodcheck read -flood-lines N -out PHASE.json [FILE...]   (default: stdin)
//	floodcheck summary DIR STYLE...
//
// read takes several files (the workers' own pipes, without gorun) and reads
// each in its own goroutine. A line's arrival is the time the read that
// brought its newline returned. summary prints the figures of the phases
// output-flood.sh ran and exits 1 when any line was lost, duplicated,
// reordered, cut or garbled.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: floodcheck read|summary ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "read":
		err = read(os.Args[2:])
	case "summary":
		var ok bool
		ok, err = summary(os.Args[2:])
		if err == nil && !ok {
			os.Exit(1)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floodcheck:", err)
		os.Exit(2)
	}
}

// maxLine is gorun's longest line held whole (launch.maxLine); a longer
// one may arrive in pieces.
const maxLine = 64 << 10

// The flood's rule, the same as flood_worker.py's.
func payloadLen(seq int) int {
	if seq%200_000 == 99_999 {
		return 65_000 + seq*13%60_000
	}
	return seq * 7 % 151
}

func payloadByte(seq, i int) byte { return byte('a' + (seq+i)%26) }

// Phase is what one run of the workers showed.
type Phase struct {
	Name string `json:"name"`

	FloodExpected  int   `json:"flood_expected"`
	FloodSeen      int   `json:"flood_seen"` // distinct lines
	FloodEnd       bool  `json:"flood_end"`  // its END line arrived
	FloodWriteNs   int64 `json:"flood_write_ns"`
	FloodFirstRecv int64 `json:"flood_first_recv"`
	FloodLastRecv  int64 `json:"flood_last_recv"`
	FloodBytes     int64 `json:"flood_bytes"`
	LongLines      int   `json:"long_lines"`     // lines over maxLine seen
	LongInPieces   int   `json:"long_in_pieces"` // of those, arrived as several lines

	QuietExpected int  `json:"quiet_expected"` // from its END line
	QuietSeen     int  `json:"quiet_seen"`
	QuietEnd      bool `json:"quiet_end"`
	// Its first and last send times: the rate it kept up (about 99/s).
	QuietFirstSend int64 `json:"quiet_first_send"`
	QuietLastSend  int64 `json:"quiet_last_send"`
	// Quiet latencies (ns), all of them and those sent while flood lines
	// were arriving.
	QuietSent     []int64 `json:"quiet_sent"` // send times, in the order of QuietLat
	QuietLat      []int64 `json:"quiet_lat"`
	QuietLatFlood []int64 `json:"quiet_lat_flood"`

	Dup       int      `json:"dup"`
	Reordered int      `json:"reordered"`
	Corrupt   int      `json:"corrupt"` // wrong length or letters, a long line cut short
	Stray     int      `json:"stray"`   // lines of neither worker
	Examples  []string `json:"examples"`
}

// checker is the state of the lines read so far; inputs share it.
type checker struct {
	mu      sync.Mutex
	p       Phase
	flood   seqs
	quiet   seqs
	samples [][2]int64 // send, receive

	// A long flood line that arrived in part; its pieces follow as
	// lines of their own (gorun's plain mode gives them no marker).
	pend    bool
	pendSeq int
	pendOff int
}

// maxSeq bounds the sequence numbers taken as such, so a garbled one cannot
// make seqs allocate without end.
const maxSeq = 1 << 26

// seqs tracks the sequence numbers of one worker.
type seqs struct {
	seen []bool
	last int
}

// add records seq and reports whether it was new and whether it came after
// a higher one.
func (s *seqs) add(seq int) (isNew, reordered bool) {
	for len(s.seen) <= seq {
		s.seen = append(s.seen, make([]bool, max(1024, len(s.seen)))...)
	}
	if s.seen[seq] {
		return false, false
	}
	s.seen[seq] = true
	reordered = seq < s.last
	s.last = max(s.last, seq)
	return true, reordered
}

func (c *checker) bad(kind *int, format string, args ...any) {
	*kind++
	if len(c.p.Examples) < 10 {
		c.p.Examples = append(c.p.Examples, fmt.Sprintf(format, args...))
	}
}

func clip(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%q... (%d bytes)", b[:80], len(b))
	}
	return strconv.Quote(string(b))
}

func (c *checker) line(b []byte, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case bytes.HasPrefix(b, []byte("F ")):
		c.floodLine(b, now)
	case bytes.HasPrefix(b, []byte("Q ")):
		c.quietLine(b, now)
	case c.pend && len(b) > 0 && b[0] >= 'a' && b[0] <= 'z':
		c.piece(b)
	default:
		c.bad(&c.p.Stray, "stray line %s", clip(b))
	}
}

func (c *checker) endPending() {
	if c.pend {
		c.bad(&c.p.Corrupt, "flood line %d cut short at %d of %d payload bytes", c.pendSeq, c.pendOff, payloadLen(c.pendSeq))
		c.pend = false
	}
}

func (c *checker) floodLine(b []byte, now int64) {
	c.endPending()
	f := bytes.SplitN(b[2:], []byte(" "), 3)
	if string(f[0]) == "END" {
		if len(f) == 3 {
			c.p.FloodEnd = true
			c.p.FloodWriteNs, _ = strconv.ParseInt(string(f[2]), 10, 64)
		} else {
			c.bad(&c.p.Corrupt, "bad flood END line %s", clip(b))
		}
		return
	}
	seq, err := strconv.Atoi(string(f[0]))
	if err != nil || len(f) != 2 || seq < 0 || seq >= maxSeq {
		c.bad(&c.p.Corrupt, "bad flood line %s", clip(b))
		return
	}
	if c.p.FloodFirstRecv == 0 {
		c.p.FloodFirstRecv = now
	}
	c.p.FloodLastRecv = now
	c.p.FloodBytes += int64(len(b) + 1)
	isNew, reordered := c.flood.add(seq)
	if !isNew {
		c.bad(&c.p.Dup, "flood line %d again", seq)
		return
	}
	c.p.FloodSeen++
	if reordered {
		c.bad(&c.p.Reordered, "flood line %d after %d", seq, c.flood.last)
	}
	want, got := payloadLen(seq), f[1]
	long := len("F  ")+len(f[0])+want > maxLine // gorun may cut it
	if long {
		c.p.LongLines++
	}
	if !c.payloadOK(seq, 0, got) {
		c.bad(&c.p.Corrupt, "flood line %d: payload %s, want %d bytes", seq, clip(got), want)
		return
	}
	if len(got) < want {
		if !long {
			c.bad(&c.p.Corrupt, "flood line %d cut at %d of %d payload bytes", seq, len(got), want)
			return
		}
		c.pend, c.pendSeq, c.pendOff = true, seq, len(got)
		c.p.LongInPieces++
	}
}

// payloadOK checks b as the payload bytes of line seq from offset off on.
func (c *checker) payloadOK(seq, off int, b []byte) bool {
	if off+len(b) > payloadLen(seq) {
		return false
	}
	for i, x := range b {
		if x != payloadByte(seq, off+i) {
			return false
		}
	}
	return true
}

func (c *checker) piece(b []byte) {
	if !c.payloadOK(c.pendSeq, c.pendOff, b) {
		c.bad(&c.p.Corrupt, "flood line %d: piece at %d is %s", c.pendSeq, c.pendOff, clip(b))
		c.pend = false
		return
	}
	c.pendOff += len(b)
	c.p.FloodBytes += int64(len(b)) // the line's newline was counted with its first piece
	if c.pendOff == payloadLen(c.pendSeq) {
		c.pend = false
	}
}

func (c *checker) quietLine(b []byte, now int64) {
	f := bytes.Fields(b[2:])
	if len(f) == 2 && string(f[0]) == "END" {
		n, err := strconv.Atoi(string(f[1]))
		if err != nil {
			c.bad(&c.p.Corrupt, "bad quiet END line %s", clip(b))
			return
		}
		c.p.QuietEnd, c.p.QuietExpected = true, n
		return
	}
	var seq int
	var sent int64
	err := errors.New("fields")
	if len(f) == 2 {
		if seq, err = strconv.Atoi(string(f[0])); err == nil {
			sent, err = strconv.ParseInt(string(f[1]), 10, 64)
		}
	}
	if err != nil || seq < 0 || seq >= maxSeq {
		c.bad(&c.p.Corrupt, "bad quiet line %s", clip(b))
		return
	}
	isNew, reordered := c.quiet.add(seq)
	if !isNew {
		c.bad(&c.p.Dup, "quiet line %d again", seq)
		return
	}
	c.p.QuietSeen++
	if reordered {
		c.bad(&c.p.Reordered, "quiet line %d after %d", seq, c.quiet.last)
	}
	c.samples = append(c.samples, [2]int64{sent, now})
	if c.p.QuietFirstSend == 0 || sent < c.p.QuietFirstSend {
		c.p.QuietFirstSend = sent
	}
	c.p.QuietLastSend = max(c.p.QuietLastSend, sent)
}

// readAll feeds r's lines to c, each with the time of the read that
// completed it.
func (c *checker) readAll(r io.Reader) error {
	buf := make([]byte, 1<<20)
	var held []byte
	var now int64
	for {
		n, err := r.Read(buf)
		now = time.Now().UnixNano()
		data := buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				held = append(held, data...)
				break
			}
			line := data[:i]
			if len(held) > 0 {
				held = append(held, line...)
				line = held
			}
			c.line(line, now)
			held = held[:0]
			data = data[i+1:]
		}
		if err == io.EOF {
			if len(held) > 0 {
				c.line(held, now) // no newline at the end: reported as it is
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func read(args []string) error {
	fs := flag.NewFlagSet("read", flag.ContinueOnError)
	name := fs.String("name", "", "phase name")
	lines := fs.Int("flood-lines", 0, "lines the flood worker prints")
	out := fs.String("out", "", "write the phase's JSON here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &checker{}
	c.flood.last, c.quiet.last = -1, -1
	inputs := []io.Reader{os.Stdin}
	if fs.NArg() > 0 {
		inputs = nil
		for _, p := range fs.Args() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			inputs = append(inputs, f)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(inputs))
	for i, r := range inputs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.readAll(r) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.endPending()
	p := &c.p
	p.Name, p.FloodExpected = *name, *lines
	if !p.QuietEnd {
		p.QuietExpected = -1
	}
	for _, sr := range c.samples {
		lat := sr[1] - sr[0]
		p.QuietSent, p.QuietLat = append(p.QuietSent, sr[0]), append(p.QuietLat, lat)
		if p.FloodSeen > 0 && sr[0] >= p.FloodFirstRecv && sr[0] <= p.FloodLastRecv {
			p.QuietLatFlood = append(p.QuietLatFlood, lat)
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}

// figures are one phase's numbers.
type figures struct {
	lost, errors         int
	floodRate, writeRate float64 // lines/s at the reader and at the worker
	p50, p99, max        float64 // quiet latency, ms
	quietRate            float64 // quiet lines/s the quiet worker sent
	samples              int     // quiet lines behind p50...
}

func pct(lat []int64, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return float64(s[min(max(i, 0), len(s)-1)]) / 1e6
}

// figures counts what p lost and its rates; the latencies are the quiet
// lines sent while the flood arrived when duringFlood is set.
func (p *Phase) figures(duringFlood bool) figures {
	var f figures
	if p.FloodExpected > 0 {
		f.lost = p.FloodExpected - p.FloodSeen
		if !p.FloodEnd {
			f.lost++
		}
		if p.FloodLastRecv > p.FloodFirstRecv {
			f.floodRate = float64(p.FloodSeen) / (float64(p.FloodLastRecv-p.FloodFirstRecv) / 1e9)
		}
		if p.FloodWriteNs > 0 {
			f.writeRate = float64(p.FloodExpected) / (float64(p.FloodWriteNs) / 1e9)
		}
	}
	f.lost += max(p.QuietExpected, 0) - p.QuietSeen
	if !p.QuietEnd {
		f.lost++
	}
	if p.QuietLastSend > p.QuietFirstSend {
		f.quietRate = float64(p.QuietSeen-1) / (float64(p.QuietLastSend-p.QuietFirstSend) / 1e9)
	}
	f.errors = f.lost + p.Dup + p.Reordered + p.Corrupt + p.Stray
	lat := p.QuietLat
	if duringFlood {
		lat = p.QuietLatFlood
	}
	f.p50, f.p99, f.max, f.samples = pct(lat, 0.50), pct(lat, 0.99), pct(lat, 1), len(lat)
	return f
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// summary prints the figures of DIR's phases: gorun_alone (the quiet worker
// alone through gorun) and, for each flood style, raw_STYLE (both workers
// straight into floodcheck's pipes: the ceiling) and gorun_STYLE.
func summary(args []string) (bool, error) {
	if len(args) < 2 {
		return false, errors.New("usage: floodcheck summary DIR STYLE...")
	}
	dir, styles := args[0], args[1:]
	ph := map[string]*Phase{}
	names := []string{"gorun_alone"}
	for _, s := range styles {
		names = append(names, "raw_"+s, "gorun_"+s)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n+".json"))
		if err != nil {
			return false, err
		}
		var p Phase
		if err := json.Unmarshal(b, &p); err != nil {
			return false, fmt.Errorf("%s: %w", n, err)
		}
		ph[n] = &p
	}

	// Claim 1: every line through gorun arrived whole, once, in order.
	var expected, seen, lost, dup, reord, corrupt, stray, long, pieces int
	for _, n := range names {
		if !strings.HasPrefix(n, "gorun_") {
			continue
		}
		p := ph[n]
		expected += p.FloodExpected + max(p.QuietExpected, 0)
		seen += p.FloodSeen + p.QuietSeen
		lost += p.figures(false).lost
		dup, reord, corrupt, stray = dup+p.Dup, reord+p.Reordered, corrupt+p.Corrupt, stray+p.Stray
		long, pieces = long+p.LongLines, pieces+p.LongInPieces
	}
	fmt.Printf("through gorun: lines_expected=%d lines_seen=%d lost=%d dup=%d reordered=%d corrupt=%d stray=%d long_lines_over_64KiB=%d arrived_in_pieces=%d\n",
		expected, seen, lost, dup, reord, corrupt, stray, long, pieces)

	// Claim 2: the flood's rate, and the quiet worker's latency beside it.
	alone := ph["gorun_alone"].figures(false)
	fmt.Printf("quiet_alone: lines=%d lines_per_s=%.1f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
		ph["gorun_alone"].QuietSeen, alone.quietRate, alone.p50, alone.p99, alone.max)
	for _, s := range styles {
		raw, g := ph["raw_"+s], ph["gorun_"+s]
		rf, gf := raw.figures(true), g.figures(true)
		fmt.Printf("flood %s: lines=%d MB=%.0f flood_lines_per_s=%.0f ceiling_lines_per_s=%.0f gorun_vs_ceiling=%s (worker side: %.0f vs %.0f)\n",
			s, g.FloodExpected, float64(g.FloodBytes)/1e6, gf.floodRate, rf.floodRate, ratio(gf.floodRate, rf.floodRate), gf.writeRate, rf.writeRate)
		for _, r := range []struct {
			name string
			f    figures
			p    *Phase
		}{{"gorun", gf, g}, {"raw", rf, raw}} {
			fmt.Printf("  quiet_with_flood %s: lines=%d lines_per_s=%.1f during_flood=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
				r.name, r.p.QuietSeen, r.f.quietRate, r.f.samples, r.f.p50, r.f.p99, r.f.max)
		}
		fmt.Printf("  ratio gorun_with_flood/gorun_alone: p50=%s p99=%s max=%s; gorun_with_flood/raw_with_flood: p50=%s p99=%s max=%s\n",
			ratio(gf.p50, alone.p50), ratio(gf.p99, alone.p99), ratio(gf.max, alone.max),
			ratio(gf.p50, rf.p50), ratio(gf.p99, rf.p99), ratio(gf.max, rf.max))
	}

	ok := true
	for _, n := range names {
		p := ph[n]
		if f := p.figures(false); f.errors > 0 {
			ok = false
			fmt.Printf("FAIL %s: lost=%d dup=%d reordered=%d corrupt=%d stray=%d\n", n, f.lost, p.Dup, p.Reordered, p.Corrupt, p.Stray)
			for _, e := range p.Examples {
				fmt.Printf("  %s\n", e)
			}
		}
	}
	return ok, nil
}
