package telemetry

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/gorun/gorun/internal/schema"
)

// JSONL writes samples as JSON Lines: one object per sample, every
// reading a number or null, so pandas.read_json(path, lines=True) loads a
// file as a table with one row per GPU and sample.
// Each line opens with stamp's fields (its schema, gorun's version, the
// Slurm job or pod), the same on every line, so the table keeps them as
// columns.
type JSONL struct {
	w     *bufio.Writer
	enc   *json.Encoder
	stamp schema.Stamp
}

// Line is one line of the file: what docs/schema's telemetry schema
// describes.
type Line struct {
	schema.Stamp
	Sample
}

// NewJSONL writes to w; Flush before closing w.
func NewJSONL(w io.Writer, stamp schema.Stamp) *JSONL {
	bw := bufio.NewWriter(w)
	return &JSONL{w: bw, enc: json.NewEncoder(bw), stamp: stamp}
}

// Write writes one sample as one line.
func (j *JSONL) Write(s Sample) error { return j.enc.Encode(Line{j.stamp, s}) }

// Flush writes what is buffered.
func (j *JSONL) Flush() error { return j.w.Flush() }
