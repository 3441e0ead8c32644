package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/preflight"
)

// RunBandwidth answers `gorun _bandwidth PAIRREQUEST` on a node: its side
// of an all_reduce with another node (preflight.PairRequest as JSON), as
// JSON on stdout.
func RunBandwidth(ctx context.Context, arg string, stdout io.Writer) error {
	var req preflight.PairRequest
	if err := json.Unmarshal([]byte(arg), &req); err != nil {
		return fmt.Errorf("%s: bad request: %w", wire.BandwidthCommand, err)
	}
	python, _ := torchrunPython(req.Torchrun)
	bw := preflight.MeasurePair(ctx, preflight.BandwidthOptions{Python: python, Environ: os.Environ()}, req)
	return json.NewEncoder(stdout).Encode(bw)
}
