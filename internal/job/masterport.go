package job

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/gorun/gorun/envplan"
)

// portSearch is how many ports above the planned one a restart tries.
const portSearch = 32

// aheadPortReason is MASTER_PORT's reason on a port masterPort.ahead chose.
const aheadPortReason = "a port of the restart's own: it began while the last attempt stopped"

// masterPort is the hook that moves the rendezvous store to the next free
// port when the one the plan uses still accepts connections as the group
// restarts (a store left by a process that is not the job's, or a port
// taken since), and that gives the next attempt a port of its own when
// its jobs are handed ahead (ahead): its torchrun starts while the old
// one, frozen, still holds the old port.
type masterPort struct {
	diag io.Writer
	// next is the port ahead chose for attempt k, which the attempt takes
	// when its jobs were handed ahead (launch.Restart.Ahead).
	next struct{ k, port int }
}

func (*masterPort) Name() string { return "master port" }

func (m *masterPort) BeforeAttempt(ctx context.Context, a *Attempt) error {
	if a.K == 0 {
		return nil
	}
	if a.Restart != nil && a.Restart.Ahead > 0 && m.next.k == a.K {
		// The torchruns handed ahead listen there already: no check.
		a.Plan = a.Plan.WithMasterPort(m.next.port, aheadPortReason)
		return nil
	}
	port, ok := a.Plan.MasterPort()
	if !ok {
		return nil
	}
	if p, ok := freePort(ctx, a.Plan, port, port+portSearch); ok {
		if p != port {
			fmt.Fprintf(m.diag, "gorun: master port %d is still held; the group restarts on port %d\n", port, p)
		}
		a.Plan = a.Plan.WithMasterPort(p, fmt.Sprintf("port %d was still held when the group restarted", port))
	}
	return nil
}

// ahead returns plan, attempt k's, with a store port for the next attempt
// that nothing holds now, above the one attempt k's torchrun holds, and
// remembers it for that attempt's BeforeAttempt; false when the plan's
// port is not gorun's to move (envplan.Plan.StorePort) or none is free.
func (m *masterPort) ahead(ctx context.Context, plan envplan.Plan, k int) (envplan.Plan, bool) {
	port, ok := plan.StorePort()
	if !ok {
		return plan, false
	}
	p, ok := freePort(ctx, plan, port+1, port+1+portSearch)
	if !ok {
		return plan, false
	}
	q := plan.WithMasterPort(p, aheadPortReason)
	if got, _ := q.StorePort(); got != p {
		return plan, false
	}
	m.next.k, m.next.port = k+1, p
	return q, true
}

// freePort returns the first port in [from, to) that does not accept a
// connection at the plan's master address.
func freePort(ctx context.Context, plan envplan.Plan, from, to int) (int, bool) {
	for p := from; p < to && p < 65536; p++ {
		d := net.Dialer{Timeout: 500 * time.Millisecond}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(plan.Config.MasterAddr, strconv.Itoa(p)))
		if err != nil {
			return p, true
		}
		c.Close()
	}
	return 0, false
}
