package node

import (
	"context"
	"encoding/json"
	"io"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gorun/gorun/internal/agent"
	"github.com/gorun/gorun/telemetry"
)

// ServeAgent is `gorun _agent`: the node agent (agent.ServeAgentWith)
// with GPUSidecar, which the head starts, locally or over SSH, to run one
// job and tear its whole tree down. It returns the agent's exit code.
func ServeAgent(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	return agent.ServeAgentWith(ctx, GPUSidecar, stdin, stdout, stderr)
}

// GPUSidecar is the node agent's sidecar (agent.Sidecar): GPU telemetry
// for the job, sampled in the agent, so NVML is loaded there and never in
// a worker. Settings it cannot read turn telemetry off quietly: the job
// matters more.
func GPUSidecar(ctx context.Context, settings json.RawMessage, send func([]byte)) {
	sidecar(ctx, settings, send, nvml.New)
}

var _ agent.Sidecar = GPUSidecar

// sidecar is GPUSidecar with the NVML handle made by newLib, and only once
// the settings are read.
func sidecar(ctx context.Context, settings json.RawMessage, send func([]byte), newLib func(...nvml.LibraryOption) nvml.Interface) {
	var cfg telemetry.Config
	if json.Unmarshal(settings, &cfg) != nil {
		return
	}
	telemetry.Run(ctx, newLib(), cfg, func(f telemetry.Frame) {
		if b, err := json.Marshal(f); err == nil {
			send(b)
		}
	})
}
