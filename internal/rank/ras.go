package rank

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/ncclras"
	"github.com/gorun/gorun/internal/wire"
)

// rasEvery is how often the RAS reporter asks NCCL how many collectives
// the job has run: a sign of progress that needs no output from the
// script. NCCL gathers the answer from every process, so not too often.
const rasEvery = 30 * time.Second

// rasReporter reports whether this worker asks NCCL's RAS for the job:
// one per job, local rank 0 of node 0 (NCCL's RAS reports on every
// process of the job from any of them), unless RAS is off.
func rasReporter(getenv func(string) string) bool {
	return getenv("LOCAL_RANK") == "0" && getenv("GROUP_RANK") == "0" && getenv("NCCL_RAS_ENABLE") != "0"
}

// watchRAS looks every so often (rasEvery) and reports progress whenever
// the job's total of collectives has grown since the last look. Without
// NCCL (nobody listens) or with an NCCL too old for the JSON report (no
// exact counts) it says nothing.
func (w *worker) watchRAS(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last uint64
	seen := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, every/2)
		text, err := ncclras.QueryJSON(qctx, w.rasAddr)
		cancel()
		if err != nil {
			continue
		}
		total, exact := ncclras.Parse(text).TotalCollectives()
		if !exact {
			continue
		}
		if seen && total > last {
			w.send(wire.FrameProgress, wire.AppendRank(nil, w.localRank))
		}
		last, seen = total, true
	}
}

// reportRAS prints NCCL's RAS report on the job, each line marked
// "nccl ras: ", then the ranks it finds lagging, and says when it is done.
func (w *worker) reportRAS(ctx context.Context) {
	var lagging []int // said with the end, for the head's culprit lines
	defer func() {
		done := wire.AppendRank(nil, w.localRank)
		if len(lagging) > 0 {
			done = append(done, wire.JSON(lagging)...)
		}
		w.send(wire.FrameRASDone, done)
	}()
	qctx, cancel := context.WithTimeout(ctx, wire.RASWait-2*time.Second)
	text, err := ncclras.Query(qctx, w.rasAddr, true)
	cancel()
	var b []byte
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if l != "" {
			b = append(append(append(b, "nccl ras: "...), l...), '\n')
		}
	}
	switch rep := ncclras.Parse(text); {
	case errors.Is(err, syscall.ECONNREFUSED):
		return // no NCCL in this job: nothing to say
	case err != nil && text == "":
		b = fmt.Appendf(b, "nccl ras: no report (%v)\n", err)
	case len(rep.Lagging()) > 0:
		lagging = rep.Lagging()
		b = fmt.Appendf(b, "nccl ras: ranks behind the others (did not join a collective, or no answer): %s\n", strings.Trim(fmt.Sprint(lagging), "[]"))
	default:
		b = append(b, "nccl ras: no rank lags in its collective count\n"...)
	}
	w.send(wire.FrameErr, append(wire.AppendRank(nil, w.localRank), b...))
}
