package fleet

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/preflight"
	"github.com/gorun/gorun/sshexec"
)

// Cross-node measurement limits: each pair's side gets crossLimit per step
// (init included: importing torch and the rendezvous) and crossBudget for
// its sizes, which grow while they fit.
const (
	crossLimit  = 20 * time.Second
	crossBudget = 3 * time.Second
)

// crossPair is two nodes (indexes into the reports) measured together.
type crossPair struct{ a, b int }

// ringRounds pairs each node with the next around a ring and schedules the
// pairs in rounds in which no node is in two pairs, so a pair's figure is
// its link's alone. Every node is in two pairs (one, with two nodes): a
// slow node slows both of its pairs, a normal neighbour only one.
func ringRounds(n int) [][]crossPair {
	var pairs []crossPair
	switch {
	case n < 2:
		return nil
	case n == 2:
		pairs = []crossPair{{0, 1}}
	default:
		for k := 0; k < n; k++ {
			pairs = append(pairs, crossPair{k, (k + 1) % n})
		}
	}
	var rounds [][]crossPair
	var busy []map[int]bool
	for _, p := range pairs {
		placed := false
		for r := range rounds {
			if !busy[r][p.a] && !busy[r][p.b] {
				rounds[r] = append(rounds[r], p)
				busy[r][p.a], busy[r][p.b] = true, true
				placed = true
				break
			}
		}
		if !placed {
			rounds = append(rounds, []crossPair{p})
			busy = append(busy, map[int]bool{p.a: true, p.b: true})
		}
	}
	return rounds
}

// pairAddress is where the other node reaches node r's rank 0: the source
// address of its route to the master (found by the collector), else its
// name; the loopback when it is this machine.
func pairAddress(r preflight.NodeReport) (addr, ifname string) {
	if rt := r.Facts.Route; rt != nil && rt.Err == "" && rt.Source != "" {
		return rt.Source, rt.Interface
	}
	if sshexec.IsLocalHost(r.Host) {
		return "127.0.0.1", "lo"
	}
	return r.Host, ""
}

// measureCross runs the ring of pairs on the reachable nodes.
func measureCross(ctx context.Context, targets []Target, reports []preflight.NodeReport, torchrun string) []preflight.CrossResult {
	var idx []int
	for i, r := range reports {
		if r.Facts.Hostname != "" || r.Facts.Time != (time.Time{}) {
			idx = append(idx, i)
		}
	}
	var out []preflight.CrossResult
	for _, round := range ringRounds(len(idx)) {
		results := make([]preflight.CrossResult, len(round))
		var wg sync.WaitGroup
		for k, p := range round {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[k] = measurePairOf(ctx, targets[idx[p.a]], targets[idx[p.b]], reports[idx[p.a]], reports[idx[p.b]], torchrun)
			}()
		}
		wg.Wait()
		out = append(out, results...)
		if ctx.Err() != nil {
			break
		}
	}
	return out
}

func measurePairOf(ctx context.Context, a, b Target, ra, rb preflight.NodeReport, torchrun string) preflight.CrossResult {
	res := preflight.CrossResult{Hosts: []string{a.Host, b.Host}}
	addr, ifname := pairAddress(ra)
	_, ifnameB := pairAddress(rb)
	port := 40000 + rand.IntN(10000)
	req := preflight.PairRequest{Torchrun: torchrun, Master: net.JoinHostPort(addr, strconv.Itoa(port)), Ifname: ifname,
		BudgetSeconds: crossBudget.Seconds(), LimitSeconds: crossLimit.Seconds()}
	pctx, cancel := context.WithTimeout(ctx, 2*crossLimit+crossBudget+10*time.Second)
	defer cancel()
	sides := make([]preflight.BandwidthFacts, 2)
	var wg sync.WaitGroup
	for rank, t := range []Target{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req
			r.Rank = rank
			if rank == 1 {
				r.Ifname = ifnameB // each node's own interface names may differ
			}
			arg, _ := json.Marshal(r)
			raw, err := t.Agent.AgentOutput(pctx, wire.BandwidthCommand, string(arg))
			if err != nil {
				sides[rank].Errors = append(sides[rank].Errors, err.Error())
				return
			}
			if err := json.Unmarshal(raw, &sides[rank]); err != nil {
				sides[rank].Errors = append(sides[rank].Errors, "unreadable answer: "+err.Error())
			}
		}()
	}
	wg.Wait()
	for rank, s := range sides {
		host := res.Hosts[rank]
		for _, st := range s.Stalled {
			res.Stalled = append(res.Stalled, host+": "+st.Step)
		}
		for _, e := range s.Errors {
			res.Errors = append(res.Errors, host+": "+e)
		}
	}
	for _, c := range sides[0].Cross {
		c.Hosts = res.Hosts
		res.Figures = append(res.Figures, c)
	}
	return res
}
