package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// A frame is a kind byte, the payload's length (uint32, big endian) and the
// payload. Every frame on the node agent's stdout is one: the agent's own
// (agent.go) and those its relay clients send (wire.go), which share that
// stream and so must never share a kind (TestFrameKindsDistinct).

// MaxFrame bounds a frame's payload, so that a confused client cannot make
// the agent or the head hold unbounded memory.
const MaxFrame = 1 << 20

// FrameHeader is the length of a frame's header.
const FrameHeader = 5 // kind byte, then the payload length (uint32, big endian)

// AppendFrame appends one frame to dst.
func AppendFrame(dst []byte, kind byte, payload []byte) []byte {
	dst = append(dst, kind, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(payload)))
	return append(dst, payload...)
}

// ReadFrame reads one frame. The payload is valid until the next call.
func ReadFrame(br *bufio.Reader, buf []byte) (kind byte, payload []byte, err error) {
	var h [FrameHeader]byte
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
	for d.err == nil && len(b) >= FrameHeader {
		n := binary.BigEndian.Uint32(b[1:FrameHeader])
		if n > MaxFrame {
			d.err = fmt.Errorf("frame of %d bytes is over the limit of %d", n, MaxFrame)
			return nil
		}
		if len(b) < FrameHeader+int(n) {
			break
		}
		d.handle(b[0], b[FrameHeader:FrameHeader+int(n)])
		b = b[FrameHeader+int(n):]
	}
	return b
}

// Err reports a malformed stream, nil if none was seen.
func (d *FrameDecoder) Err() error { return d.err }

// Pending returns the start of a frame still coming and forgets it, for a
// caller that hands the rest of the stream to another reader.
func (d *FrameDecoder) Pending() []byte {
	b := d.buf
	d.buf = nil
	return b
}

// MaxLine bounds a JSON line (the job line, a pool's request or reply), so
// that a confused peer cannot exhaust memory.
const MaxLine = 16 << 20

// ReadLine reads up to and excluding '\n', refusing lines over limit bytes.
func ReadLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("job line longer than %d bytes", limit)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("stdin closed before the job line ended: %w", io.ErrUnexpectedEOF)
		default:
			return nil, fmt.Errorf("read job line: %w", err)
		}
	}
}

// WriteWithRights writes b on c, the rights (fds) going with its first
// bytes. One sendmsg on a stream socket may take only part of b (a
// worker's 30,000 arguments): the rest follows.
func WriteWithRights(c *net.UnixConn, b, rights []byte) error {
	n, _, err := c.WriteMsgUnix(b, rights, nil)
	if err != nil || n == len(b) {
		return err // no empty write after it: the reader may have closed its end by then
	}
	_, err = c.Write(b[n:])
	return err
}
