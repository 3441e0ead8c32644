package agent

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// flushFrame is wire.FrameFlush's whole frame: the kind, a payload length of
// 1, the newline.
const flushFrame = "n\x00\x00\x00\x01\n"

// lostFirstMax bounds what wire.FrameLost keeps of a client's first frame.
const lostFirstMax = 4 << 10

// relay is the agent's side of wire.Job.Relay: a unix socket the job's
// descendants connect to, and one writer that puts their frames and the
// main process's output on the agent's stdout, whole frames only.
type relay struct {
	dir  string
	lock *os.File // privateDir's
	ln   *net.UnixListener

	mu   sync.Mutex // serialises writes to out and guards conns
	out  io.Writer
	end  byte // wire.Job.RelayEnd
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
	// goC is made when the job was handed ahead (wire.Job.Gated: its workers'
	// supervisors wait for wire.RelayGo; nil otherwise) and closed by its
	// release, once the head said so. A client that connects after the
	// release gets wire.RelayGo at once.
	goC      chan struct{}
	released bool

	readers sync.WaitGroup

	tmu     sync.Mutex // guards tells and sending
	tells   [][]byte   // queued by tell, sent in order
	sending bool       // a sendTells goroutine runs
}

// startRelay listens on a fresh socket in a private directory.
func startRelay(out io.Writer, end byte) (*relay, error) {
	dir, lock, err := privateDir(wire.RelayDirPrefix)
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
		hungUp: make(chan struct{}, 1), lineBuffered: os.Getenv(wire.AgentStepVar) != ""}
	r.readers.Add(1)
	go r.accept()
	return r, nil
}

func (r *relay) path() string { return filepath.Join(r.dir, "sock") }

// poolPath is where the job's worker pool listens (wire.Job.Pool).
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
			_, _ = c.Write([]byte{wire.RelayGo})
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
		kind, payload, err := wire.ReadFrame(br, buf)
		if err != nil {
			if r.end != 0 && first != nil && !ended {
				r.write(wire.AppendFrame(nil, wire.FrameLost, first))
			}
			return
		}
		buf = payload[:0]
		if kind == wire.FrameStdout || kind == wire.FrameStderr || kind == wire.FrameTelemetry || kind == wire.FrameStart || kind == wire.FrameLost {
			continue // the agent's own kinds cannot be forged
		}
		if first == nil {
			first = append([]byte{kind}, payload[:min(len(payload), lostFirstMax-1)]...)
		}
		ended = ended || kind == r.end
		frame = wire.AppendFrame(frame[:0], kind, payload)
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

// gate holds the job's workers until open (wire.Job.Gated); called before the
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
// every one that connects later, gets wire.RelayGo (one that is told of a stop
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
	send(conns, []byte{wire.RelayGo})
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
// that the job stops (msg: wire.RelayStop or wire.RelayHad and the signal), and
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
