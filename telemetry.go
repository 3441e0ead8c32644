package main

import (
	"context"
	"encoding/json"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gorun/gorun/telemetry"
)

// gpuSidecar is the node agent's sidecar (sshexec.ServeAgentWith): GPU
// telemetry for the job, sampled in the agent, so NVML is loaded there and
// never in a worker. Settings it cannot read turn telemetry off quietly:
// the job matters more.
func gpuSidecar(ctx context.Context, settings json.RawMessage, send func([]byte)) {
	var cfg telemetry.Config
	if json.Unmarshal(settings, &cfg) != nil {
		return
	}
	telemetry.Run(ctx, nvml.New(), cfg, func(f telemetry.Frame) {
		if b, err := json.Marshal(f); err == nil {
			send(b)
		}
	})
}
