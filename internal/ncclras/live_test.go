package ncclras

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestLive asks a real NCCL's RAS, on a GPU node where an NCCL job runs
// collectives (examples/gpu/nccl_loop.py): GORUN_RAS_LIVE=host:port, or
// "default" for localhost:28028. The job's total of collectives must grow
// between two reports, which is what the hang detector counts as progress.
func TestLive(t *testing.T) {
	addr := os.Getenv("GORUN_RAS_LIVE")
	if addr == "" {
		t.Skip("GORUN_RAS_LIVE is not set (needs a running NCCL job)")
	}
	if addr == "default" {
		addr = ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	text, err := Query(ctx, addr, true)
	if err != nil {
		t.Fatalf("verbose status: %v", err)
	}
	t.Logf("VERBOSE STATUS:\n%s", text)
	rep := Parse(text)
	if len(rep.Comms) == 0 || rep.NCCLVersion == "" {
		t.Errorf("parsed %+v: no communicator or version", rep)
	}
	var totals []uint64
	for i := range 2 {
		js, err := QueryJSON(ctx, addr)
		if err != nil {
			t.Fatalf("json status: %v", err)
		}
		if i == 0 {
			t.Logf("JSON:\n%s", js)
		}
		total, exact := Parse(js).TotalCollectives()
		t.Logf("total collectives %d (exact %v)", total, exact)
		if !exact {
			t.Fatalf("the JSON report gave no exact total")
		}
		totals = append(totals, total)
		time.Sleep(2 * time.Second)
	}
	switch {
	case len(rep.Comms) > 0 && rep.Comms[0].Size == 1:
		// Seen with NCCL 2.28.9 on one GPU: a communicator of one rank
		// counts no collectives (0 after thousands of all_reduces).
		t.Logf("a communicator of one rank counts no collectives; growth needs 2 or more ranks (totals %v)", totals)
	case totals[1] <= totals[0]:
		t.Errorf("total did not grow: %v", totals)
	}
	t.Logf("lagging ranks: %v", rep.Lagging())
}
