package preflight

import (
	"context"
	"fmt"
	"net"
	"time"
)

// MasterProbe is the check a node makes, when gorun runs on it alone (one
// gorun per Kubernetes pod), that the rendezvous store it must join, on
// another node, accepts a TCP connection.
type MasterProbe struct {
	// Addr is the store's "host:port".
	Addr string
	// From says where Addr came from ("PET_MASTER_ADDR:PET_MASTER_PORT",
	// "--rdzv-endpoint"), for the message.
	From string
	// Wait bounds the retries: the store is up only once the master's
	// torchrun runs, and its pod may start later than this one.
	// Zero means DefaultMasterWait.
	Wait time.Duration
}

// DefaultMasterWait is how long a node retries its probe of the master's
// store. The master's pod may be scheduled, pulled and preflighted later
// than this one, and its store opens only when its torchrun starts: a few
// seconds when the pods start together. Waiting longer buys nothing, since
// torchrun itself waits for the store up to its rendezvous timeout.
const DefaultMasterWait = 60 * time.Second

// Probe timing: each try is bounded, and a refused or unresolved address
// is tried again a second later.
const (
	masterDialTimeout = 3 * time.Second
	masterRetryEvery  = time.Second
)

// ProbeMaster opens TCP connections to p.Addr until one connects or
// p.Wait has passed, and says what it found as a "net.master" finding.
// A store that never answered is a warning, not a fail: on Kubernetes the
// master's pod may simply come later (still pending, still pulling its
// image), and torchrun waits for it up to its own rendezvous timeout;
// failing here would only restart this pod, and with a JobSet every pod,
// for a peer that was on its way. ProbeMaster returns early, with a
// warning, when ctx ends.
func ProbeMaster(ctx context.Context, p MasterProbe) Finding {
	wait := p.Wait
	if wait <= 0 {
		wait = DefaultMasterWait
	}
	start := time.Now()
	deadline := start.Add(wait)
	tries := 0
	var last error
	for {
		tries++
		tctx, cancel := context.WithTimeout(ctx, min(masterDialTimeout, max(time.Until(deadline), 100*time.Millisecond)))
		d := net.Dialer{}
		t0 := time.Now()
		c, err := d.DialContext(tctx, "tcp", p.Addr)
		cancel()
		if err == nil {
			local := c.LocalAddr().String()
			c.Close()
			msg := fmt.Sprintf("the master's rendezvous store at %s (%s) accepts TCP: connected in %.1f ms", p.Addr, p.From, float64(time.Since(t0).Microseconds())/1000)
			if tries > 1 {
				msg += fmt.Sprintf(", after %d tries in %.0f s", tries, time.Since(start).Seconds())
			}
			return ok("net.master", msg, "from "+local)
		}
		last = err
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(masterRetryEvery, time.Until(deadline))):
		}
	}
	return Finding{ID: "net.master", Severity: SeverityWarn,
		Message: fmt.Sprintf("the master's rendezvous store at %s (%s) did not accept a TCP connection within %s (%d tries); torchrun starts anyway and waits for it up to its rendezvous timeout",
			p.Addr, p.From, wait.Round(time.Second), tries),
		Evidence: last.Error(),
		Remedy: "the store opens when node 0's torchrun starts: if node 0's pod is still pending or pulling its image, nothing is wrong; " +
			"otherwise check that the master address names node 0's pod (on Kubernetes a headless Service that publishes not-ready addresses, " +
			"as JobSet's does) and resolves from this pod, that the port is the one node 0 uses, and that no NetworkPolicy blocks it"}
}
