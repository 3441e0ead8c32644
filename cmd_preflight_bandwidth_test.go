package main

import (
	"strings"
	"testing"

	"github.com/gorun/gorun/preflight"
)

// TestPlanFactsCarryP2PFaults: a corrupted P2P copy found by preflight
// --bandwidth reaches the plan as that node's P2PFaults, and only that
// node's.
func TestPlanFactsCarryP2PFaults(t *testing.T) {
	bad := &preflight.BandwidthFacts{P2P: []preflight.P2PBandwidth{{Src: 0, Dst: 1, BadBytes: 3}}}
	good := &preflight.BandwidthFacts{P2P: []preflight.P2PBandwidth{{Src: 0, Dst: 1}}}
	facts := planFacts(preflight.Report{Nodes: []preflight.NodeReport{
		{Host: "a", Facts: preflight.Facts{Bandwidth: good}},
		{Host: "b", Facts: preflight.Facts{Bandwidth: bad}},
		{Host: "c"},
	}})
	if got := strings.Join(facts["b"].P2PFaults, ","); got != "GPU0→GPU1 wrong data" {
		t.Errorf("b: P2PFaults %q", got)
	}
	if facts["a"].P2PFaults != nil || facts["c"].P2PFaults != nil {
		t.Errorf("a, c: P2PFaults %q, %q; want none", facts["a"].P2PFaults, facts["c"].P2PFaults)
	}
}

func TestPreflightArgsBandwidth(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		rest string
	}{
		{[]string{"--bandwidth", "node", "--hosts", "a"}, "node", "--hosts a"},
		{[]string{"--json", "--bandwidth=all"}, "all", ""},
		{[]string{"--", "--bandwidth", "node"}, "", "-- --bandwidth node"},
	} {
		_, _, bw, rest, err := preflightArgs(tc.args)
		if err != nil || bw != tc.want || strings.Join(rest, " ") != tc.rest {
			t.Errorf("%q: bandwidth %q rest %q err %v; want %q, %q", tc.args, bw, rest, err, tc.want, tc.rest)
		}
	}
}
