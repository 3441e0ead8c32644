package envplan

import (
	"fmt"
	"strings"
)

// p2pFaultRule turns NCCL's P2P transport off on a node whose P2P data
// path failed preflight's bandwidth check (wrong bytes or a stalled copy,
// typically an IOMMU or a PCIe switch with ACS on): NCCL then moves data
// through host memory, slower but correct. Only that node is affected, and
// a value the user set wins (overrideNotes says so).
func (b *builder) p2pFaultRule(e nodeEnv, f NodeFacts) {
	if len(f.P2PFaults) == 0 {
		return
	}
	if b.p2pOff == nil {
		b.p2pOff = map[string]bool{}
	}
	b.p2pOff["NCCL_P2P_DISABLE"] = true
	e.decide("NCCL_P2P_DISABLE", Var{
		Value: "1",
		Reason: fmt.Sprintf("preflight --bandwidth: P2P between this node's GPUs failed (%s); NCCL goes through host memory instead until the IOMMU/ACS setting is fixed",
			strings.Join(f.P2PFaults, ", ")),
		Source: SourceGorun,
	})
}
