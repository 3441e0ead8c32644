package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/preflight"
)

func TestRingRounds(t *testing.T) {
	for n := 0; n <= 7; n++ {
		rounds := ringRounds(n)
		seen := map[[2]int]bool{}
		for _, r := range rounds {
			busy := map[int]bool{}
			for _, p := range r {
				if busy[p.a] || busy[p.b] {
					t.Errorf("n=%d: a node in two pairs of one round: %v", n, r)
				}
				busy[p.a], busy[p.b] = true, true
				seen[[2]int{p.a, p.b}] = true
			}
		}
		want := n
		if n == 2 {
			want = 1
		} else if n < 2 {
			want = 0
		}
		if len(seen) != want {
			t.Errorf("n=%d: %d pairs, want %d", n, len(seen), want)
		}
		if n > 2 && len(rounds) > 3 {
			t.Errorf("n=%d: %d rounds, want at most 3", n, len(rounds))
		}
	}
}

// pairAgent answers the collector and the pair measurement on this
// machine, as two nodes would.
type pairAgent struct {
	host, python string
	env          []string
}

func (a pairAgent) AgentOutput(ctx context.Context, args ...string) ([]byte, error) {
	switch args[0] {
	case wire.CollectCommand:
		return json.Marshal(preflight.Facts{Hostname: a.host, Time: time.Now(), Route: &preflight.Route{Target: "127.0.0.1", Interface: "lo", Source: "127.0.0.1"}})
	case wire.BandwidthCommand:
		var req preflight.PairRequest
		if err := json.Unmarshal([]byte(args[1]), &req); err != nil {
			return nil, err
		}
		return json.Marshal(preflight.MeasurePair(ctx, preflight.BandwidthOptions{Python: a.python, Environ: a.env}, req))
	}
	return nil, fmt.Errorf("unexpected %q", args)
}

// TestBandwidthAllGloo runs `--bandwidth all`'s cross-node step for real:
// two local processes, gloo over the loopback, through Run.
func TestBandwidthAllGloo(t *testing.T) {
	py := testenv.TorchPython(t)
	env := append(os.Environ(), "GLOO_SOCKET_IFNAME=lo")
	targets := []Target{{Host: "n1", Agent: pairAgent{"n1", py, env}}, {Host: "n2", Agent: pairAgent{"n2", py, env}}}
	rep := Run(context.Background(), targets, RunOptions{Bandwidth: preflight.BandwidthAll, NodeTimeout: 30 * time.Second})
	if len(rep.Cross) != 1 || len(rep.Cross[0].Figures) == 0 {
		t.Fatalf("cross = %+v", rep.Cross)
	}
	c := rep.Cross[0]
	if c.Figures[0].Backend != "gloo" || c.Figures[0].AlgBW <= 0 || c.Figures[0].BadValues != 0 || strings.Join(c.Hosts, ",") != "n1,n2" {
		t.Errorf("figures = %+v", c)
	}
	var out strings.Builder
	rep.WriteText(&out)
	if !strings.Contains(out.String(), "n1↔n2") || !strings.Contains(out.String(), "bandwidth.cross") {
		t.Errorf("report:\n%s", out.String())
	}
}
