package job

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// portSearch is how many ports above the planned one a restart tries.
const portSearch = 32

// masterPort is the hook that moves the rendezvous store to the next free
// port when the one the plan uses still accepts connections as the group
// restarts (a store left by a process that is not the job's, or a port
// taken since).
type masterPort struct {
	diag io.Writer
}

func (*masterPort) Name() string { return "master port" }

func (m *masterPort) BeforeAttempt(ctx context.Context, a *Attempt) error {
	if a.K == 0 {
		return nil
	}
	port, ok := a.Plan.MasterPort()
	if !ok {
		return nil
	}
	held := func(p int) bool {
		d := net.Dialer{Timeout: 500 * time.Millisecond}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a.Plan.Config.MasterAddr, strconv.Itoa(p)))
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	for p := port; p < port+portSearch && p < 65536; p++ {
		if !held(p) {
			if p != port {
				fmt.Fprintf(m.diag, "gorun: master port %d is still held; the group restarts on port %d\n", port, p)
			}
			a.Plan = a.Plan.WithMasterPort(p)
			return nil
		}
	}
	return nil
}
