package term

import (
	"io"
	"sync"
	"time"
)

// StampLayout is the time at the start of a line under --timestamps:
// RFC 3339 with milliseconds.
const StampLayout = "2006-01-02T15:04:05.000Z07:00"

// Stamper is gorun's own stderr: it passes writes through to W as they
// are until Enable, and from then on begins every line with the time it
// was written (--timestamps).
type Stamper struct {
	W   io.Writer
	Now func() time.Time // nil: time.Now

	mu      sync.Mutex
	on      bool
	midLine bool // the last write left a line open
	buf     []byte
}

// Enable turns the stamps on.
func (s *Stamper) Enable() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = true
}

// Write writes p to W, a stamp before each line it begins.
func (s *Stamper) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on || len(p) == 0 {
		return s.W.Write(p)
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	stamp := now().AppendFormat(nil, StampLayout)
	b := s.buf[:0]
	for _, c := range p {
		if !s.midLine {
			b = append(append(b, stamp...), ' ')
		}
		b = append(b, c)
		s.midLine = c != '\n'
	}
	s.buf = b
	if _, err := s.W.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}
