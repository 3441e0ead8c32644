package sshexec

import (
	"context"
	"sync"

	"github.com/hashicorp/go-multierror"
)

// DefaultFanout bounds how many nodes are dialled at once: enough for a
// large cluster to connect in seconds, few enough not to trip sshd's
// MaxStartups (10:30:100 by default) on a shared jump host.
const DefaultFanout = 32

// HostError is one host's failure in a fan-out. Its message names the
// host ("node NAME: cause"), so the cause need not.
type HostError struct {
	Host string
	Err  error
}

func (e *HostError) Error() string { return "node " + e.Host + ": " + e.Err.Error() }
func (e *HostError) Unwrap() error { return e.Err }

// ForEach calls fn for every item, at most limit at a time (limit <= 0
// means DefaultFanout), and returns a *multierror.Error with one *HostError
// per failing item, in input order, or nil. Its message is one line per
// failing item, "node NAME: cause", so fn's errors need not name the host;
// past collapseAbove failing items, items that failed alike share a line
// (see collapseAbove).
// It stops starting new calls once ctx ends; the items not started fail
// with ctx's error.
func ForEach(ctx context.Context, hosts []string, limit int, fn func(ctx context.Context, host string) error) error {
	if limit <= 0 {
		limit = DefaultFanout
	}
	errs := make([]error, len(hosts))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, h := range hosts {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(ctx, h)
		}()
	}
	wg.Wait()
	var all *multierror.Error
	for i, err := range errs {
		if err != nil {
			all = multierror.Append(all, &HostError{Host: hosts[i], Err: err})
		}
	}
	if all == nil {
		return nil
	}
	all.ErrorFormat = oneLinePerError
	return all
}

// DialAll dials every host (duplicates once), at most limit at a time. It
// runs cfg.Check first: a problem there (a missing --known-hosts, an
// unusable --ssh-identity) is returned alone, before any connection,
// since it would fail every host alike. Otherwise it returns the
// connections that succeeded, keyed by host, and an error naming every
// host that failed (a *multierror.Error of *HostError, one line per host,
// through which errors.Is and errors.As reach each host's cause, a
// *HostKeyError among them). The caller closes the returned Remotes, also when err is not
// nil, so it can report on every node in one pass. cfg.Warn hears each
// distinct warning once for the whole call.
func DialAll(ctx context.Context, hosts []string, cfg Config, limit int) (map[string]*Remote, error) {
	cfg, w := withWarner(cfg)
	defer w.flush()
	if err := cfg.Check(ctx); err != nil {
		return map[string]*Remote{}, err
	}
	var unique []string
	seen := map[string]bool{}
	for _, h := range hosts {
		if !seen[h] {
			seen[h] = true
			unique = append(unique, h)
		}
	}
	// ssh_config, known_hosts, identities and the agent: read once, for
	// every dial.
	in := newInputs(ctx, cfg, w)
	defer in.close()
	var mu sync.Mutex
	remotes := make(map[string]*Remote, len(unique))
	done := 0
	err := ForEach(ctx, unique, limit, func(ctx context.Context, h string) error {
		r, err := in.dial(ctx, h) // the *HostError names h
		mu.Lock()
		defer mu.Unlock()
		if done++; cfg.Dialled != nil {
			cfg.Dialled(done, len(unique))
		}
		if err != nil {
			return err
		}
		remotes[h] = r
		return nil
	})
	return remotes, err
}
