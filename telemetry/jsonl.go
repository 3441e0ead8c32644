package telemetry

import (
	"bufio"
	"encoding/json"
	"io"
)

// JSONL writes samples as JSON Lines: one object per sample, every
// reading a number or null, so pandas.read_json(path, lines=True) loads a
// file as a table with one row per GPU and sample.
type JSONL struct {
	w   *bufio.Writer
	enc *json.Encoder
}

// NewJSONL writes to w; Flush before closing w.
func NewJSONL(w io.Writer) *JSONL {
	bw := bufio.NewWriter(w)
	return &JSONL{w: bw, enc: json.NewEncoder(bw)}
}

// Write writes one sample as one line.
func (j *JSONL) Write(s Sample) error { return j.enc.Encode(s) }

// Flush writes what is buffered.
func (j *JSONL) Flush() error { return j.w.Flush() }
