package launch

import (
	"context"
	"sync"

	"github.com/gorun/gorun/sshexec"
)

// WarmFirst starts the first attempt's torchrun ahead on every node whose
// runner can (sshexec.Warmer) and whose job asks for it (wire.Job.Preimport):
// its interpreter imports while the head still checks the nodes and makes
// the plan, and the attempt's start hands it its job as a restart's would.
// nodes are the jobs of a plan made without preflight's facts: what the
// facts change (the CPUs of each rank) is not read as the interpreter
// imports, and a job whose import-time variables differ from the one
// warmed starts cold, as it would have. The worker pool, whose slots are
// bound to those CPUs, is left out: it starts when the job is handed
// over, where the job's own start would have started it.
//
// It returns once every node's agent has started (not imported): what
// the head does next may close the runners, which stops their agents.
func WarmFirst(ctx context.Context, nodes []Node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		w, ok := n.Runner.(sshexec.Warmer)
		if !ok || n.Workers <= 0 || len(n.Job.Preimport) == 0 {
			continue
		}
		job := attemptJob(Options{}, n.Job)
		job.Pool, job.AskAhead = nil, nil
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), warmStartTimeout)
			defer cancel()
			_ = w.Warm(wctx, job) // without it, the attempt starts cold, as ever
		})
	}
	wg.Wait()
}
