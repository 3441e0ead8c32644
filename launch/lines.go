package launch

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorun/gorun/internal/wire"
)

// Limits on held output.
const (
	// maxLine is the longest line held whole; a longer one is written in
	// pieces of this size, each continuation marked with contMarker.
	maxLine = 64 << 10
	// maxPlainLine is the same in plain mode, where nothing could mark a
	// piece: a line up to this long is held and written whole; only
	// beyond it are pieces written, which other lines may come between.
	maxPlainLine = 16 << 20
	// tailLines is how many last lines per node the failure summary keeps.
	tailLines = 20
	// tailLineBytes bounds each kept line; longer ones are cut with "…".
	tailLineBytes = 512
	// batchBytes is the size past which a Write hands its lines to the
	// writer goroutine before it has read all its input.
	batchBytes = 64 << 10
)

// Partial lines of a worker's stream (a progress bar's "\r" updates, a
// prompt) are not held until their newline (see lineWriter.flushHeld).
const (
	// liveAfter is how long a partial line is held before what there is
	// of it is written: long enough that a line written in two writes
	// (Python's print writes the text, then the newline) stays whole.
	liveAfter = 100 * time.Millisecond
	// liveEvery bounds, in prefixed mode, how often one line's pieces are
	// written, since each becomes a line of its own there.
	liveEvery = time.Second
)

// contMarker follows the prefix of every piece of an over-long line after the
// first: "[node1 0]+ ...".
const contMarker = '+'

// sink is the one goroutine that writes to Out and Diag, so whole lines from
// any number of streams never interleave, and gorun's own messages land in
// order with the lines before them.
//
// Once a stop from outside has begun (bound), a write that cannot go out
// within stallLimit (a pipe whose reader does not read) turns the sink to
// dropping: what comes after is counted, not written, so that neither the
// nodes nor gorun's own exit wait on that reader past the stop's grace.
type sink struct {
	ch     chan sinkMsg
	done   chan struct{}
	pool   sync.Pool
	status *statusLine // nil: no status line

	bounded  atomic.Bool
	boundC   chan struct{} // closed by bound
	boundOne sync.Once
	dropping atomic.Bool
	dropped  atomic.Int64 // bytes not written
}

// Bounds on writes once a stop from outside has begun.
const (
	stallLimit = 500 * time.Millisecond // one write's wait before the sink drops
	closeLimit = 500 * time.Millisecond // close's wait for writes in progress
)

type sinkMsg struct {
	w       io.Writer
	b       *[]byte
	refresh bool // redraw the status line; w and b are nil
	own     bool // gorun's own text (message): it begins on a line of its own
}

func newSink(status *statusLine) *sink {
	s := &sink{ch: make(chan sinkMsg, 8), done: make(chan struct{}), boundC: make(chan struct{}), status: status}
	s.pool.New = func() any { b := make([]byte, 0, 4096); return &b }
	go func() {
		defer close(s.done)
		open := false // the last write left a line open (plain mode: a worker's partial line)
		for m := range s.ch {
			if m.refresh {
				s.status.draw(true)
				continue
			}
			if s.dropping.Load() {
				s.drop(m.b)
				continue
			}
			s.status.erase()
			if m.own && open {
				_, _ = io.WriteString(m.w, "\n")
			}
			// A failing terminal or pipe must not stop supervision; the
			// lines are dropped.
			_, _ = m.w.Write(*m.b)
			open = (*m.b)[len(*m.b)-1] != '\n'
			s.status.wrote(*m.b)
			if len(s.ch) == 0 {
				s.status.draw(false)
			}
			s.put(m.b)
		}
		s.status.erase()
	}()
	return s
}

// refresh asks the writer goroutine to redraw the status line.
func (s *sink) refresh() {
	if s.status != nil {
		s.ch <- sinkMsg{refresh: true}
	}
}

func (s *sink) get() *[]byte { return s.pool.Get().(*[]byte) }

func (s *sink) put(b *[]byte) {
	if cap(*b) > 4*batchBytes {
		return // let an outsized buffer go rather than pin it
	}
	*b = (*b)[:0]
	s.pool.Put(b)
}

// send hands b to the writer goroutine, which owns it from then on.
func (s *sink) send(w io.Writer, b *[]byte) { s.sendMsg(sinkMsg{w: w, b: b}) }

func (s *sink) sendMsg(m sinkMsg) {
	b := m.b
	if len(*b) == 0 {
		s.put(b)
		return
	}
	if s.dropping.Load() {
		s.drop(b)
		return
	}
	select {
	case s.ch <- m:
		return
	case <-s.boundC: // a send already waiting is bounded too
	}
	t := time.NewTimer(stallLimit)
	defer t.Stop()
	select {
	case s.ch <- m:
	case <-t.C:
		s.dropping.Store(true)
		s.drop(b)
	}
}

func (s *sink) drop(b *[]byte) {
	s.dropped.Add(int64(len(*b)))
	s.put(b)
}

// bound limits how long writes may wait from now on (see sink).
func (s *sink) bound() {
	s.boundOne.Do(func() {
		s.bounded.Store(true)
		close(s.boundC)
	})
}

// message writes msg (ending in a newline) to w after the output already
// sent, on a line of its own: after a worker's partial line (plain mode)
// it begins with a newline.
func (s *sink) message(w io.Writer, msg string) {
	b := s.get()
	*b = append(*b, msg...)
	s.sendMsg(sinkMsg{w: w, b: b, own: true})
}

// close waits until everything sent has been written, or, once bound, at
// most closeLimit; it reports how many bytes were dropped. Nothing may be
// sent after close.
func (s *sink) close() int64 {
	close(s.ch)
	if !s.bounded.Load() {
		<-s.done
		return s.dropped.Load()
	}
	t := time.NewTimer(closeLimit)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C: // a write stuck on a reader that does not read: left behind
		s.dropping.Store(true)
	}
	return s.dropped.Load()
}

// ANSI colours for node prefixes, picked by node index; no red, which reads
// as an error.
var nodeColors = [...]string{"\x1b[36m", "\x1b[33m", "\x1b[32m", "\x1b[35m", "\x1b[34m", "\x1b[96m", "\x1b[93m", "\x1b[92m"}

const colorReset = "\x1b[0m"

// nodeLog is what one node's streams share: its name and colour, its last
// lines (all of them, and each worker's) and what torchrun said about the
// root cause.
type nodeLog struct {
	name  string
	color string // "" for no colour
	plain bool   // lines pass through as they are: no prefix, worker prefixes kept
	stamp bool   // each line begins with the time it came (Prefix.Stamp)

	// tagWorkers prefixes worker lines in plain mode too, from the moment
	// several workers' stacks are printed at once (a hang diagnosis).
	tagWorkers atomic.Bool

	mu     sync.Mutex
	all    tail
	ranks  map[int]*tail
	global map[int]int // each local rank's global rank, once its worker said
	cause  causeParser
}

// tail keeps the last tailLines lines.
type tail struct {
	lines [tailLines]tailLine
	next  int // slot the next line goes to
	count int
}

type tailLine struct {
	rank int
	text []byte
}

func (t *tail) add(rank int, text []byte) {
	l := &t.lines[t.next]
	l.rank = rank
	if len(text) > tailLineBytes {
		l.text = append(append(l.text[:0], truncUTF8(text, tailLineBytes)...), "…"...)
	} else {
		l.text = append(l.text[:0], text...)
	}
	t.next = (t.next + 1) % tailLines
	if t.count < tailLines {
		t.count++
	}
}

// render returns the kept lines, oldest first, prefixed as on Out without
// colour (in gorun's own form, whatever the template), global ranks
// from global.
func (t *tail) render(name string, global map[int]int) []string {
	out := make([]string, 0, t.count)
	for i := range t.count {
		l := t.lines[(t.next-t.count+i+tailLines)%tailLines]
		g, ok := global[l.rank]
		if !ok {
			g = -1
		}
		p := appendPrefix(nil, name, "", l.rank, g, false)
		out = append(out, string(append(p, l.text...)))
	}
	return out
}

func newNodeLog(name string, index int, color, plain bool) *nodeLog {
	l := &nodeLog{name: name, plain: plain, ranks: map[int]*tail{}, global: map[int]int{}}
	if color {
		l.color = nodeColors[index%len(nodeColors)]
	}
	return l
}

// record keeps a finished line (text without prefix); rank is its worker's
// local rank, -1 for torchrun's own lines, which also feed the Root Cause
// parser.
func (l *nodeLog) record(rank int, text []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.add(rank, text)
	if rank < 0 {
		l.cause.feed(text)
		return
	}
	t := l.ranks[rank]
	if t == nil {
		t = &tail{}
		l.ranks[rank] = t
	}
	t.add(rank, text)
}

// lastLines returns the node's last lines, oldest first, prefixed as on Out
// without colour.
func (l *nodeLog) lastLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.render(l.name, l.global)
}

// lastLinesOf returns the last lines of one local rank.
func (l *nodeLog) lastLinesOf(rank int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.ranks[rank]; t != nil {
		return t.render(l.name, l.global)
	}
	return nil
}

func (l *nodeLog) rootCause() (rootCause, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause.result()
}

// setGlobal records that local rank lr is global rank g.
func (l *nodeLog) setGlobal(lr, g int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.global[lr] = g
}

// appendPrefix appends "[node1 3 r11] " for local rank 3, global rank 11
// ("[node1 3] " while the global rank is not known, -1; "[node1] " for
// torchrun's own lines, rank -1), with the continuation marker after the
// bracket when cont is set.
func appendPrefix(dst []byte, name, color string, rank, global int, cont bool) []byte {
	dst = append(dst, color...)
	dst = append(dst, '[')
	dst = append(dst, name...)
	if rank >= 0 {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(rank), 10)
		if global >= 0 {
			dst = append(dst, " r"...)
			dst = strconv.AppendInt(dst, int64(global), 10)
		}
	}
	dst = append(dst, ']')
	if cont {
		dst = append(dst, contMarker)
	}
	if color != "" {
		dst = append(dst, colorReset...)
	}
	return append(dst, ' ')
}

// lineWriter is one stream (stdout or stderr) of one node. It holds a partial
// line until its newline and hands complete, prefixed lines to the sink in
// batches, one batch per Write. It is safe for concurrent use, though a
// runner writes each stream from one goroutine.
//
// A worker's own stream (newRankWriter) does not hold a partial line
// longer than liveAfter: what there is of it is then written as a piece
// (flushHeld). In plain mode the piece is the worker's bytes as they are,
// and the rest of the line follows it, as on a terminal under torchrun.
// In prefixed mode each piece is a line of its own, the later ones marked
// with contMarker, so that no other line is ever glued to it; a piece
// shows what a terminal would show of it (the text after its last "\r",
// the current frame of a progress bar), at most one per liveEvery.
type lineWriter struct {
	log  *nodeLog
	sink *sink
	out  io.Writer

	// rank is the local rank of a worker's own stream; -1 for torchrun's,
	// whose lines may carry --tee's worker prefix.
	rank int
	// teeCopy, when set, tells torchrun's --tee copies of the lines of
	// workers that send their own, which are dropped.
	teeCopy func(line []byte) bool
	// own and ownCont are a worker's own stream's prefixes (Prefix.forWorker),
	// of a line and of a piece after its first; fixed is set for such a stream.
	own, ownCont []byte
	fixed        bool

	mu       sync.Mutex
	partial  []byte
	cont     bool // the held line has already been written in part
	contRank int
	closed   bool
	prefixes [][]byte // cached prefixes by local rank; index 0 is torchrun's own

	// Partial lines written live (a worker's stream only: live is set).
	live      bool
	heldAt    time.Time // when the held partial line began; zero: none held
	lastPiece time.Time // when the last live piece was written
	livePart  bool      // the line's pieces so far were written live
	armed     stopper   // the pending flushHeld; nil: none
	now       func() time.Time
	afterFunc func(time.Duration, func()) stopper
}

// stopper is a pending timer (time.AfterFunc's).
type stopper interface{ Stop() bool }

func newLineWriter(log *nodeLog, s *sink, out io.Writer) *lineWriter {
	return &lineWriter{log: log, sink: s, out: out, rank: -1}
}

// newRankWriter returns the writer of one worker's stream, going where
// parent (torchrun's stream of the same kind) goes, its lines marked by
// the prefixes p gives the stream (bit: 1 stdout, 2 stderr).
func newRankWriter(log *nodeLog, parent *lineWriter, st wire.WorkerStarted, p Prefix, bit int) *lineWriter {
	w := &lineWriter{log: log, sink: parent.sink, out: parent.out, rank: st.LocalRank, fixed: true,
		live: true, now: time.Now, afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }}
	w.own, w.ownCont = p.forWorker(log, st, bit)
	log.setGlobal(st.LocalRank, st.Rank)
	return w
}

// Write never fails: output after close is dropped, since the process it
// came from has been waited for.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return n, nil
	}
	b := w.sink.get()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			*b = w.cutLong(*b)
			break
		}
		line := p[:i]
		if len(w.partial) > 0 {
			w.partial = append(w.partial, line...)
			line = w.partial
		}
		*b = w.endLine(*b, line)
		w.partial = w.partial[:0]
		w.heldAt = time.Time{}
		p = p[i+1:]
		if len(*b) >= batchBytes {
			w.sink.send(w.out, b)
			b = w.sink.get()
		}
	}
	w.sink.send(w.out, b)
	if w.live && len(w.partial) > 0 {
		if w.heldAt.IsZero() {
			w.heldAt = w.now()
		}
		w.arm()
	}
	return n, nil
}

// arm schedules flushHeld for when the held partial line is due, unless
// it is scheduled already. w.mu is held.
func (w *lineWriter) arm() {
	if w.armed == nil {
		w.armed = w.afterFunc(w.dueIn(w.now()), w.flushHeld)
	}
}

// dueIn is how long from now the held partial line may wait.
func (w *lineWriter) dueIn(now time.Time) time.Duration {
	due := w.heldAt.Add(liveAfter)
	if !w.log.plain && w.livePart {
		due = later(due, w.lastPiece.Add(liveEvery))
	}
	return max(due.Sub(now), 0)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// flushHeld writes what is held of a partial line once it is due (see
// lineWriter): it runs on its own goroutine, from arm's timer.
func (w *lineWriter) flushHeld() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = nil
	if w.closed || len(w.partial) == 0 {
		return
	}
	now := w.now()
	if w.dueIn(now) > 0 {
		w.arm()
		return
	}
	cut := wholeRunes(w.partial) // the rest of a UTF-8 sequence comes with the next write
	seg := w.partial[:cut]
	if !w.log.plain {
		seg = lastFrame(seg)
	}
	b := w.sink.get()
	if len(seg) > 0 {
		*b = w.piece(*b, seg)
		w.livePart, w.lastPiece = true, now
	}
	w.partial = w.partial[:copy(w.partial, w.partial[cut:])]
	w.heldAt = time.Time{}
	if len(w.partial) > 0 {
		w.heldAt = now
		w.arm()
	}
	w.sink.send(w.out, b)
}

// lastFrame is what a terminal shows of b once it is written: the text
// after its last carriage return that is followed by any.
func lastFrame(b []byte) []byte {
	b = bytes.TrimRight(b, "\r")
	return b[bytes.LastIndexByte(b, '\r')+1:]
}

// close flushes a partial last line, with a newline in prefixed mode (in
// plain mode it stays as the worker wrote it); later writes are dropped.
func (w *lineWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	if w.armed != nil {
		w.armed.Stop()
		w.armed = nil
	}
	if len(w.partial) > 0 || w.cont {
		b := w.sink.get()
		if w.log.plain {
			if len(w.partial) > 0 {
				*b = w.piece(*b, w.partial)
			}
			w.cont, w.livePart = false, false
		} else {
			*b = w.endLine(*b, w.partial)
		}
		w.partial = nil
		w.sink.send(w.out, b)
	}
}

// cutLong writes the held partial line in pieces while it is longer than
// maxLine, keeping the rest.
func (w *lineWriter) cutLong(b []byte) []byte {
	limit := w.limit()
	if len(w.partial) <= limit {
		return b
	}
	off := 0
	for len(w.partial)-off > limit {
		cut := cutPoint(w.partial[off : off+limit])
		b = w.piece(b, w.partial[off:off+cut])
		off += cut
	}
	rest := copy(w.partial, w.partial[off:])
	w.partial = w.partial[:rest]
	if cap(w.partial) > 4*limit {
		w.partial = append([]byte(nil), w.partial...)
	}
	return b
}

// endLine writes the end of a line: the whole line, or the last piece of one
// already written in part. Plain mode keeps a "\r" before the newline, as
// the worker wrote it; prefixed lines lose it.
func (w *lineWriter) endLine(b, line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\r' && !w.log.plain {
		line = line[:n-1]
	}
	if w.livePart {
		w.livePart = false
		if !w.log.plain {
			line = lastFrame(line) // as its pieces were
		}
	}
	for limit := w.limit(); len(line) > limit; {
		cut := cutPoint(line[:limit])
		b = w.piece(b, line[:cut])
		line = line[cut:]
	}
	if w.cont {
		w.cont = false
		if len(line) == 0 {
			if w.log.plain {
				b = append(b, '\n') // ends the line the pieces began
			}
			return b
		}
		b = w.stamp(b)
		b = append(b, w.prefix(w.contRank, true)...)
		b = append(b, line...)
		return append(b, '\n')
	}
	if w.teeCopy != nil && w.teeCopy(line) {
		return b // torchrun's --tee copy of a line the worker sent itself
	}
	rank, text := w.split(line)
	w.log.record(rank, text)
	b = w.stamp(b)
	b = append(b, w.prefix(rank, false)...)
	b = append(b, text...)
	return append(b, '\n')
}

// stamp appends the time before a line (Prefix.Stamp); in plain mode not
// before a piece that goes on a line already begun.
func (w *lineWriter) stamp(b []byte) []byte {
	if !w.log.stamp || w.log.plain && w.cont {
		return b
	}
	return appendStamp(b, time.Now())
}

// limit is the longest line held whole.
func (w *lineWriter) limit() int {
	if w.log.plain {
		return maxPlainLine
	}
	return maxLine
}

// piece writes one piece of an over-long line. In plain mode, where no
// prefix marks a piece, the pieces are written without a newline between
// them, so the line comes out whole, as torchrun would print it.
func (w *lineWriter) piece(b, seg []byte) []byte {
	if w.cont {
		b = w.stamp(b)
		b = append(b, w.prefix(w.contRank, true)...)
		b = append(b, seg...)
		return w.endPiece(b)
	}
	rank, text := w.split(seg)
	w.log.record(rank, text)
	b = w.stamp(b)
	w.cont, w.contRank = true, rank
	b = append(b, w.prefix(rank, false)...)
	b = append(b, text...)
	return w.endPiece(b)
}

func (w *lineWriter) endPiece(b []byte) []byte {
	if w.log.plain {
		return b
	}
	return append(b, '\n')
}

// split takes torchrun's worker prefix off a line, except in plain mode,
// where lines are shown exactly as torchrun printed them.
func (w *lineWriter) split(line []byte) (int, []byte) {
	if w.rank >= 0 {
		return w.rank, line
	}
	if w.log.plain {
		return -1, line
	}
	return splitWorkerPrefix(line)
}

// prefix returns the prefix for rank, cached for the common small ranks;
// none in plain mode, but a worker's --tee prefix there, and every
// worker's once several workers' stacks are shown (tagWorkers).
func (w *lineWriter) prefix(rank int, cont bool) []byte {
	if w.fixed {
		switch {
		case !w.log.plain:
			if cont {
				return w.ownCont
			}
			return w.own
		case w.own != nil:
			if cont {
				return nil // the rest of the line the prefix began
			}
			return w.own
		case !w.log.tagWorkers.Load():
			return nil
		}
		return appendPrefix(nil, w.log.name, w.log.color, rank, w.global(rank), cont)
	}
	if w.log.plain && (rank < 0 || !w.log.tagWorkers.Load()) {
		return nil
	}
	if cont || rank >= 255 {
		return appendPrefix(nil, w.log.name, w.log.color, rank, -1, cont)
	}
	i := rank + 1
	for len(w.prefixes) <= i {
		w.prefixes = append(w.prefixes, nil)
	}
	if w.prefixes[i] == nil {
		w.prefixes[i] = appendPrefix(nil, w.log.name, w.log.color, rank, -1, false)
	}
	return w.prefixes[i]
}

// global is local rank lr's global rank, -1 while not known.
func (w *lineWriter) global(lr int) int {
	w.log.mu.Lock()
	defer w.log.mu.Unlock()
	if g, ok := w.log.global[lr]; ok {
		return g
	}
	return -1
}

// cutPoint is where to cut a piece of at most len(b) bytes: before a
// trailing '\r' (so a CRLF split across pieces is still stripped) and not
// inside a UTF-8 sequence.
func cutPoint(b []byte) int {
	n := wholeRunes(b)
	if n == 0 {
		n = len(b)
	}
	if n > 1 && b[n-1] == '\r' {
		n--
	}
	return n
}

// wholeRunes is the length of b without a UTF-8 sequence cut short at
// its end.
func wholeRunes(b []byte) int {
	n := len(b)
	for k := 1; k <= utf8.UTFMax && k <= n; k++ {
		if utf8.RuneStart(b[n-k]) {
			if !utf8.FullRune(b[n-k:]) {
				return n - k
			}
			break
		}
	}
	return n
}

// truncUTF8 returns at most n bytes of b, not ending inside a UTF-8 sequence.
func truncUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return b[:n]
}

// splitWorkerPrefix recognises the "[<role><local_rank>]:" that torchrun
// --tee puts before every worker line ("[default0]:hello") and returns the
// local rank and the rest; a line without it is torchrun's own (rank -1).
// The role is a name (letters, digits, '_', '-', '.') starting with a letter
// or '_'; all trailing digits are read as the rank, so a role that itself
// ends in a digit (--role=trainer1) cannot be told apart.
func splitWorkerPrefix(line []byte) (int, []byte) {
	if len(line) < 4 || line[0] != '[' {
		return -1, line
	}
	const maxInner = 64
	end := -1
	for i := 1; i < len(line) && i <= maxInner+1; i++ {
		c := line[i]
		if c == ']' {
			end = i
			break
		}
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return -1, line
		}
	}
	if end < 2 || end+1 >= len(line) || line[end+1] != ':' {
		return -1, line
	}
	inner := line[1:end]
	if c := inner[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
		return -1, line
	}
	d := len(inner)
	for d > 0 && inner[d-1] >= '0' && inner[d-1] <= '9' {
		d--
	}
	digits := inner[d:]
	if len(digits) == 0 || len(digits) > 6 || len(digits) > 1 && digits[0] == '0' {
		return -1, line
	}
	rank := 0
	for _, c := range digits {
		rank = rank*10 + int(c-'0')
	}
	return rank, line[end+2:]
}
