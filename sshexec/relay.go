package sshexec

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// RelayDirPrefix begins the name of the private directory that holds a
// relay's socket; the job's processes may keep files of their own there,
// which go with it.
const RelayDirPrefix = "gorun-agent-"

// RelaySocketVar names the unix socket, in a relayed job's environment, on
// which the job's descendants report to the agent (see Job.Relay).
const RelaySocketVar = "GORUN_AGENT_SOCK"

// Frame kinds the agent itself writes; every other kind comes from a relay
// client and is passed on untouched.
const (
	FrameStdout byte = 'O' // a chunk of the job's main process's stdout
	FrameStderr byte = 'E' // a chunk of its stderr
	// FrameTelemetry carries what the agent's sidecar (ServeAgentWith)
	// sends while the job runs: in gorun, one GPU sample or notice as JSON
	// (telemetry.Frame). sshexec does not read it.
	FrameTelemetry byte = 'T'
	// FrameLost says that a relay client hung up without its last word
	// (a frame of kind Job.RelayEnd): it was killed. The payload is the
	// first frame it sent (kind byte, then payload, cut at lostFirstMax),
	// which says who it was.
	FrameLost byte = 'L'
	// FrameFlush carries one newline and means nothing. Under Slurm,
	// slurmstepd line-buffers a step's output (srun's --unbuffered would
	// put the agent on a pseudo-terminal, which rewrites binary frames),
	// so a frame with no newline byte in it (a worker's start, its join of
	// the store, a heartbeat) would wait there for the next one that has
	// one: seconds, or the job's end. An agent that runs as a step ends
	// each write with this frame.
	FrameFlush byte = 'n'
)

// flushFrame is FrameFlush's whole frame: the kind, a payload length of
// 1, the newline.
const flushFrame = "n\x00\x00\x00\x01\n"

// lostFirstMax bounds what FrameLost keeps of a client's first frame.
const lostFirstMax = 4 << 10

// MaxFrame bounds a frame's payload, so that a confused client cannot make
// the agent or the head hold unbounded memory.
const MaxFrame = 1 << 20

const frameHeader = 5 // kind byte, then the payload length (uint32, big endian)

// AppendFrame appends one frame to dst.
func AppendFrame(dst []byte, kind byte, payload []byte) []byte {
	dst = append(dst, kind, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(payload)))
	return append(dst, payload...)
}

// ReadFrame reads one frame. The payload is valid until the next call.
func ReadFrame(br *bufio.Reader, buf []byte) (kind byte, payload []byte, err error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes is over the limit of %d", n, MaxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(br, buf); err != nil {
		return 0, nil, fmt.Errorf("frame cut short: %w", io.ErrUnexpectedEOF)
	}
	return h[0], buf, nil
}

// FrameDecoder is an io.Writer that cuts a relayed agent's stdout into
// frames, however the bytes arrive, and hands each to a function. It is
// not safe for concurrent use; a runner writes each stream from one
// goroutine.
type FrameDecoder struct {
	handle func(kind byte, payload []byte)
	buf    []byte
	err    error
}

// NewFrameDecoder returns a decoder calling handle for every frame; the
// payload is valid only during the call.
func NewFrameDecoder(handle func(kind byte, payload []byte)) *FrameDecoder {
	return &FrameDecoder{handle: handle}
}

// Write implements io.Writer. After a malformed header it drops the rest,
// so the agent's pipe keeps draining; Err reports what went wrong.
func (d *FrameDecoder) Write(p []byte) (int, error) {
	if d.err != nil {
		return len(p), nil
	}
	n := len(p)
	if len(d.buf) == 0 {
		p = d.whole(p) // the common case: frames straight from p, no copy
	}
	d.buf = append(d.buf, p...)
	rest := d.whole(d.buf)
	d.buf = d.buf[:copy(d.buf, rest)]
	if cap(d.buf) > 4*MaxFrame && len(d.buf) < MaxFrame {
		d.buf = append([]byte(nil), d.buf...)
	}
	return n, nil
}

// whole hands every complete frame at the start of b to the handler and
// returns what is left.
func (d *FrameDecoder) whole(b []byte) []byte {
	for d.err == nil && len(b) >= frameHeader {
		n := binary.BigEndian.Uint32(b[1:frameHeader])
		if n > MaxFrame {
			d.err = fmt.Errorf("frame of %d bytes is over the limit of %d", n, MaxFrame)
			return nil
		}
		if len(b) < frameHeader+int(n) {
			break
		}
		d.handle(b[0], b[frameHeader:frameHeader+int(n)])
		b = b[frameHeader+int(n):]
	}
	return b
}

// Err reports a malformed stream, nil if none was seen.
func (d *FrameDecoder) Err() error { return d.err }

// relay is the agent's side of Job.Relay: a unix socket the job's
// descendants connect to, and one writer that puts their frames and the
// main process's output on the agent's stdout, whole frames only.
type relay struct {
	dir  string
	lock *os.File // privateDir's
	ln   *net.UnixListener

	mu   sync.Mutex // serialises writes to out and guards conns
	out  io.Writer
	end  byte // Job.RelayEnd
	werr error
	// lineBuffered: out is read by slurmstepd, which passes it on a line
	// at a time; each write ends with flushFrame.
	lineBuffered bool
	conns        map[*net.UnixConn]struct{}
	// hungUp has a value once a client has hung up since it was last
	// read: a stop looks at once whether torchrun is alone.
	hungUp chan struct{}
	// stopped is the stop's tell once one was made: a client that
	// connects after it (a worker's supervisor that torchrun started just
	// before it was frozen) gets it at once, or its worker would run on
	// until the grace ran out.
	stopped []byte
	// goC is made when the job was handed ahead (Job.Gated: its workers'
	// supervisors wait for RelayGo; nil otherwise) and closed by its
	// release, once the head said so. A client that connects after the
	// release gets RelayGo at once.
	goC      chan struct{}
	released bool

	readers sync.WaitGroup

	tmu     sync.Mutex // guards tells and sending
	tells   [][]byte   // queued by tell, sent in order
	sending bool       // a sendTells goroutine runs
}

// startRelay listens on a fresh socket in a private directory.
func startRelay(out io.Writer, end byte) (*relay, error) {
	dir, lock, err := privateDir(RelayDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	path := filepath.Join(dir, "sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		lock.Close()
		return nil, fmt.Errorf("relay: %w", err)
	}
	go sweepPrivateDirs(os.TempDir(), privateDirPrefixes(), time.Now()) // off the start's path
	r := &relay{dir: dir, lock: lock, ln: ln, out: out, end: end, conns: map[*net.UnixConn]struct{}{},
		hungUp: make(chan struct{}, 1), lineBuffered: os.Getenv(AgentStepVar) != ""}
	r.readers.Add(1)
	go r.accept()
	return r, nil
}

func (r *relay) path() string { return filepath.Join(r.dir, "sock") }

// poolPath is where the job's worker pool listens (Job.Pool).
func (r *relay) poolPath() string { return filepath.Join(r.dir, "pool") }

func (r *relay) accept() {
	defer r.readers.Done()
	for {
		c, err := r.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		r.mu.Lock()
		r.conns[c] = struct{}{}
		stopped, goNow := r.stopped, r.released
		r.mu.Unlock()
		switch {
		case stopped != nil:
			_, _ = c.Write(stopped) // a client that is gone is gone
		case goNow:
			_, _ = c.Write([]byte{RelayGo})
		}
		r.readers.Add(1)
		go r.read(c)
	}
}

// read passes one client's frames on until it hangs up.
func (r *relay) read(c *net.UnixConn) {
	defer r.readers.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.Close()
		select {
		case r.hungUp <- struct{}{}:
		default: // one is pending already
		}
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	var buf, frame, first []byte
	ended := false
	for {
		kind, payload, err := ReadFrame(br, buf)
		if err != nil {
			if r.end != 0 && first != nil && !ended {
				r.write(AppendFrame(nil, FrameLost, first))
			}
			return
		}
		buf = payload[:0]
		if kind == FrameStdout || kind == FrameStderr || kind == FrameTelemetry || kind == FrameStart || kind == FrameLost {
			continue // the agent's own kinds cannot be forged
		}
		if first == nil {
			first = append([]byte{kind}, payload[:min(len(payload), lostFirstMax-1)]...)
		}
		ended = ended || kind == r.end
		frame = AppendFrame(frame[:0], kind, payload)
		r.write(frame)
	}
}

// write puts one or more whole frames on out. After a write error (the
// head is gone) frames are dropped; the agent is stopping anyway.
func (r *relay) write(frames []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLocked(frames)
}

// writeLocked is write with r.mu held.
func (r *relay) writeLocked(frames []byte) {
	if len(frames) == 0 {
		return
	}
	if r.werr == nil {
		_, r.werr = r.out.Write(frames)
	}
	if r.werr == nil && r.lineBuffered {
		_, r.werr = io.WriteString(r.out, flushFrame)
	}
}

// What the agent itself tells its relay clients (gorun's worker
// supervisors), each followed by one byte, a signal's number. The bytes
// the head sends through Process.Tell are passed on as they are; gorun's
// own (wire.TellDump, wire.TellRAS) differ from these.
const (
	// RelayStop: the job is stopping; give your worker the signal, once.
	RelayStop byte = 'T'
	// RelaySignal: give your worker the signal, once; nothing stops.
	RelaySignal byte = 'S'
	// RelayHad: gorun itself got the signal from outside (this agent, or
	// the head, which passed it on as a ctlInterrupt), and stops the job.
	// A signal that reached gorun and you both was sent to every process
	// of the job (Slurm signalling a step, say), and your worker has its
	// own copy; otherwise give it the signal, once.
	RelayHad byte = 'H'
	// RelayGo: the job handed ahead is released (Job.Gated); start your
	// worker. No byte follows.
	RelayGo byte = 'G'
)

// gate holds the job's workers until open (Job.Gated); called before the
// job starts.
func (r *relay) gate() {
	r.mu.Lock()
	r.goC = make(chan struct{})
	r.mu.Unlock()
}

// releasedC is closed when a gated job is released (open), and is nil for
// a job without a gate: it starts as it is.
func (r *relay) releasedC() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.goC
}

// open releases a gated job's workers: every client connected now, and
// every one that connects later, gets RelayGo (one that is told of a stop
// first gets that instead). said, if any, goes on the agent's stream
// first, before any worker can hear of the release. open reports whether
// this call released the job: false when it had no gate, was released
// already or was stopped.
func (r *relay) open(said []byte) bool {
	r.mu.Lock()
	if r.goC == nil || r.released || r.stopped != nil {
		r.mu.Unlock()
		return false
	}
	r.writeLocked(said)
	r.released = true
	close(r.goC)
	conns := r.connList()
	r.mu.Unlock()
	send(conns, []byte{RelayGo})
	return true
}

// tell queues msg for every connected client without blocking, sent
// after the tells before it: a request of several bytes (a resize's size)
// arrives whole and in order.
func (r *relay) tell(msg []byte) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	r.tells = append(r.tells, msg)
	if !r.sending {
		r.sending = true
		go r.sendTells()
	}
}

func (r *relay) sendTells() {
	for {
		r.tmu.Lock()
		if len(r.tells) == 0 {
			r.sending = false
			r.tmu.Unlock()
			return
		}
		msg := r.tells[0]
		r.tells = r.tells[1:]
		r.tmu.Unlock()
		r.broadcast(msg)
	}
}

// broadcast sends msg to every connected client.
func (r *relay) broadcast(msg []byte) {
	r.mu.Lock()
	conns := r.connList()
	r.mu.Unlock()
	send(conns, msg)
}

// connList lists the connected clients; r.mu is held.
func (r *relay) connList() []*net.UnixConn {
	conns := make([]*net.UnixConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	return conns
}

func send(conns []*net.UnixConn, msg []byte) {
	for _, c := range conns {
		_, _ = c.Write(msg) // a client that is gone is gone
	}
}

// stop tells every client, and every client that connects from now on,
// that the job stops (msg: RelayStop or RelayHad and the signal), and
// returns how many were connected.
func (r *relay) stop(msg []byte) int {
	r.mu.Lock()
	r.stopped = msg // from here on accept tells, under the same lock: each client once
	conns := r.connList()
	r.mu.Unlock()
	send(conns, msg)
	return len(conns)
}

// clients reports how many clients are connected.
func (r *relay) clients() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// close stops accepting, waits for the clients still connected to hang up
// (their processes are gone when the agent calls this) and removes the
// socket.
func (r *relay) close() {
	r.ln.Close()
	r.readers.Wait()
	// A process of the job that is still ending may write into the folder
	// as it goes (a supervisor that never connected, its heartbeat file),
	// and the folder's removal then fails: a few more passes take it.
	for try := 0; os.RemoveAll(r.dir) != nil && try < 5; try++ {
		time.Sleep(20 * time.Millisecond)
	}
	r.lock.Close()
}
