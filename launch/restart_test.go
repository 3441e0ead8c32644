package launch

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/sshexec"
)

func TestBackoff(t *testing.T) {
	opts := Options{Backoff: time.Second, BackoffMax: 5 * time.Second}
	for _, tc := range []struct {
		n    int
		lost bool
		want time.Duration
	}{
		{1, false, 0}, {2, false, time.Second}, {3, false, 2 * time.Second}, {4, false, 4 * time.Second},
		{5, false, 5 * time.Second}, {40, false, 5 * time.Second},
		{1, true, time.Second}, {2, true, 2 * time.Second},
	} {
		if got := backoff(opts, tc.n, tc.lost); got != tc.want {
			t.Errorf("backoff(restart %d, lost %v) = %v, want %v", tc.n, tc.lost, got, tc.want)
		}
	}
	if got := backoff(Options{}, 3, true); got != 0 {
		t.Errorf("no Backoff: %v", got)
	}
	if got := backoff(Options{Backoff: time.Second}, 12, false); got != 1024*time.Second {
		t.Errorf("no cap: %v", got)
	}
}

func TestRestartString(t *testing.T) {
	r := Restart{Attempt: 0, Stopped: 40 * time.Millisecond, Handed: 45 * time.Millisecond, Warm: 2, Nodes: 3,
		WorkersUp: 900 * time.Millisecond, FirstLine: 12 * time.Second}
	want := "gorun: restart after attempt 1: failure seen, stopped +40ms, next torchrun handed its command line +45ms (warm on 2 of 3 nodes), workers started +900ms, first line +12s; longest: workers started → first line (11.1s)"
	if got := r.String(); got != want {
		t.Errorf("String =\n%s\nwant\n%s", got, want)
	}
	// The checks before the restart, where they ran.
	r.GPUFree, r.Checked, r.Handed = 300*time.Millisecond, 800*time.Millisecond, 810*time.Millisecond
	r.FirstLine = 1000 * time.Millisecond
	r.Pooled, r.Workers = 5, 6
	want = "gorun: restart after attempt 1: failure seen, stopped +40ms, GPU memory free +300ms, nodes rechecked +800ms, next torchrun handed its command line +810ms (warm on 2 of 3 nodes), workers started +900ms (5 of 6 pooled), first line +1000ms; longest: GPU memory free → nodes rechecked (500ms)"
	if got := r.String(); got != want {
		t.Errorf("String =\n%s\nwant\n%s", got, want)
	}
	if got := (Restart{Attempt: 1, Stopped: 5 * time.Millisecond}).String(); !strings.HasSuffix(got, "stopped +5ms; longest: failure seen → stopped (5ms)") {
		t.Errorf("partial: %s", got)
	}
	// Handed ahead: in the order the milestones were reached.
	r = Restart{Stopped: 60 * time.Millisecond, Handed: 5 * time.Millisecond, Ahead: 2, AheadUsed: 2, Warm: 2, Nodes: 2, Released: 62 * time.Millisecond,
		WorkersUp: 80 * time.Millisecond, FirstLine: 81 * time.Millisecond}
	want = "gorun: restart after attempt 1: failure seen, next torchrun handed its command line +5ms (ahead on 2 of 2 nodes, warm on 2 of 2 nodes), stopped +60ms, workers released +62ms, workers started +80ms, first line +81ms; longest: next torchrun handed its command line → stopped (55ms)"
	if got := r.String(); got != want {
		t.Errorf("String =\n%s\nwant\n%s", got, want)
	}
	// One node's job changed (replaced by the recheck): stopped unused.
	r.Ahead, r.AheadUsed, r.Warm, r.Nodes = 3, 2, 3, 3
	want = "gorun: restart after attempt 1: failure seen, next torchrun handed its command line +5ms (ahead on 2 of 3 nodes, 1 job handed ahead then stopped unused, warm on 3 of 3 nodes), stopped +60ms"
	if got := r.String(); !strings.HasPrefix(got, want) {
		t.Errorf("String =\n%s\nwant it to begin\n%s", got, want)
	}
	// Handed ahead while the attempt ran: before the failure, and no
	// stretch of the restart.
	r = Restart{Stopped: 60 * time.Millisecond, Handed: -4200 * time.Millisecond, Ahead: 1, AheadUsed: 1, Warm: 1, Nodes: 1, Released: 62 * time.Millisecond,
		WorkersUp: 70 * time.Millisecond, FirstLine: 71 * time.Millisecond}
	want = "gorun: restart after attempt 1: failure seen, next torchrun handed its command line 4200ms before (ahead on 1 of 1 nodes, warm on 1 of 1 nodes), stopped +60ms, workers released +62ms, workers started +70ms, first line +71ms; longest: failure seen → stopped (60ms)"
	if got := r.String(); got != want {
		t.Errorf("String =\n%s\nwant\n%s", got, want)
	}
	if ms := r.Milestones(); len(ms) != 5 || ms[0].At != r.Handed {
		t.Errorf("Milestones = %+v, want the hand-off first, at its negative offset", ms)
	}
}

// warmRunner is a fakeRunner that is also an sshexec.Warmer.
type warmRunner struct {
	*fakeRunner
	mu    sync.Mutex
	warms []wire.Job
}

func (w *warmRunner) Warm(_ context.Context, job wire.Job) error {
	w.mu.Lock()
	w.warms = append(w.warms, job)
	w.mu.Unlock()
	return nil
}

func (*warmRunner) Cool() {}

func (w *warmRunner) warmCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.warms)
}

// TestRunWarmsAndTimesARestart: once every worker of a node has joined
// the store (or ended) and a restart is left, its runner is asked to warm
// the next attempt, and so is each of its Standby runners (a spare) with
// its job, whose pool imports beside the node's workers (Pool.Beside);
// the restart's timeline is kept in the result and said.
func TestRunWarmsAndTimesARestart(t *testing.T) {
	var runners, spares []*warmRunner
	var pools []*wire.Pool
	var mu sync.Mutex
	attempt := func(_ context.Context, k int, _ *Restart) ([]Node, error) {
		sc := script{after: 50 * ms, code: 0, frames: []timedFrame{
			{ms, started(0, 0)}, {ms, started(1, 1)}, {ms, joined(0)}, {ms, joined(1)},
			{ms, wire.AppendFrame(nil, wire.FrameOut, append(wire.AppendRank(nil, 0), "hello\n"...))}}}
		if k == 0 {
			sc.code = 1
		}
		r := &warmRunner{fakeRunner: &fakeRunner{name: "node1", sc: sc}}
		spare := &warmRunner{fakeRunner: &fakeRunner{name: "spare"}}
		pool := &wire.Pool{Auto: true}
		mu.Lock()
		runners, spares, pools = append(runners, r), append(spares, spare), append(pools, pool)
		mu.Unlock()
		return []Node{{Name: "node1", Runner: r, Workers: 2, Standby: []sshexec.Runner{spare},
			Job: wire.Job{Argv: []string{"torchrun"}, Preimport: []string{"torch.distributed.run"}, Pool: pool}}}, nil
	}
	var diag syncBuffer
	res, err := Run(context.Background(), Options{Attempt: attempt, MaxRestarts: 1, Diag: &diag, HangTimeout: 10 * time.Minute})
	if err != nil || res.Attempts != 2 {
		t.Fatalf("Run = %+v, %v\n%s", res, err, diag.String())
	}
	deadline := time.Now().Add(2 * time.Second)
	for (runners[0].warmCount() == 0 || spares[0].warmCount() == 0) && time.Now().Before(deadline) {
		time.Sleep(ms)
	}
	if runners[0].warmCount() != 1 || !runners[0].warms[0].Relay {
		t.Errorf("attempt 0 warmed %d times, want once, relayed", runners[0].warmCount())
	}
	if spares[0].warmCount() != 1 || !slices.Equal(spares[0].warms[0].Argv, []string{"torchrun"}) {
		t.Errorf("attempt 0 warmed its spare %d times (%+v), want once with the node's job", spares[0].warmCount(), spares[0].warms)
	}
	for _, w := range []*warmRunner{runners[0], spares[0]} {
		if w.warmCount() == 1 && (w.warms[0].Pool == nil || w.warms[0].Pool.Beside != 2 || w.warms[0].Pool.Wait != 5*time.Minute) {
			t.Errorf("the next attempt's pool of %s: %+v, want Beside 2 (the node's workers) and Wait 5m (half the hang limit)", w.name, w.warms[0].Pool)
		}
	}
	if pools[0].Beside != 0 || pools[0].Wait != 0 {
		t.Error("the attempt's own pool was changed, not copied")
	}
	if runners[1].warmCount() != 0 || spares[1].warmCount() != 0 {
		t.Error("the last attempt warmed a next one that cannot come")
	}
	if len(res.Restarts) != 1 {
		t.Fatalf("restarts = %+v", res.Restarts)
	}
	rs := res.Restarts[0]
	if rs.Failed.IsZero() || rs.Handed < rs.Stopped || rs.WorkersUp < rs.Handed || rs.FirstLine < rs.Handed {
		t.Errorf("timeline out of order: %+v", rs)
	}
	if !strings.Contains(diag.String(), "gorun: restart after attempt 1: failure seen") {
		t.Errorf("diag = %s", diag.String())
	}
}

// TestRunWarmsAtAStartUpCrash: a worker that fails before its node's
// workers are all past their imports (a crash at start-up) leaves that
// node without a standby; the stop for the restart asks for one at once,
// so its import runs beside the stop. A node whose workers had all joined
// has its standby already and is not asked twice.
func TestRunWarmsAtAStartUpCrash(t *testing.T) {
	var mu sync.Mutex
	runners := map[int][]*warmRunner{} // by attempt: node1, node2
	attempt := func(_ context.Context, k int, _ *Restart) ([]Node, error) {
		crash := script{stopCode: 1, frames: []timedFrame{
			{ms, started(0, 0)}, {ms, started(1, 1)}, {20 * ms, exited(0, 0, 3, 0, false, time.Now())}}}
		peer := script{stopCode: 1, frames: []timedFrame{{ms, started(0, 2)}, {ms, started(1, 3)}, {ms, joined(0)}, {ms, joined(1)}}}
		if k > 0 {
			crash = script{after: 20 * ms, frames: []timedFrame{{ms, started(0, 0)}, {ms, started(1, 1)}}}
			peer = script{after: 20 * ms, frames: []timedFrame{{ms, started(0, 2)}, {ms, started(1, 3)}}}
		}
		r1 := &warmRunner{fakeRunner: &fakeRunner{name: "node1", sc: crash}}
		r2 := &warmRunner{fakeRunner: &fakeRunner{name: "node2", sc: peer}}
		mu.Lock()
		runners[k] = []*warmRunner{r1, r2}
		mu.Unlock()
		job := wire.Job{Argv: []string{"torchrun"}, Preimport: []string{"torch.distributed.run"}}
		return []Node{{Name: "node1", Runner: r1, Workers: 2, Job: job}, {Name: "node2", Runner: r2, Workers: 2, Job: job}}, nil
	}
	var diag syncBuffer
	res, err := Run(context.Background(), Options{Attempt: attempt, MaxRestarts: 1, Diag: &diag})
	if err != nil || res.Attempts != 2 {
		t.Fatalf("Run = %+v, %v\n%s", res, err, diag.String())
	}
	first := runners[0]
	deadline := time.Now().Add(2 * time.Second)
	for (first[0].warmCount() == 0 || first[1].warmCount() == 0) && time.Now().Before(deadline) {
		time.Sleep(ms)
	}
	time.Sleep(20 * ms) // a second warm, if one were coming
	for i, r := range first {
		if n := r.warmCount(); n != 1 {
			t.Errorf("node%d of attempt 0 warmed %d times, want once", i+1, n)
		}
	}
	for i, r := range runners[1] {
		if n := r.warmCount(); n != 0 {
			t.Errorf("node%d of the last attempt warmed %d times: no attempt follows it", i+1, n)
		}
	}
}

// TestRunWarmsOnceAllImported: a node whose workers have all joined the
// store waits for every other node's before its standby starts, so that
// its standby's import slows no node still importing; then every node's
// starts.
func TestRunWarmsOnceAllImported(t *testing.T) {
	quick := script{after: 500 * ms, frames: []timedFrame{{ms, started(0, 0)}, {ms, joined(0)}}}
	slow := script{after: 500 * ms, frames: []timedFrame{{ms, started(0, 1)}, {300 * ms, joined(0)}}}
	r0 := &warmRunner{fakeRunner: &fakeRunner{name: "node0", sc: quick}}
	r1 := &warmRunner{fakeRunner: &fakeRunner{name: "node1", sc: slow}}
	job := wire.Job{Argv: []string{"torchrun"}, Preimport: []string{"torch.distributed.run"}}
	attempt := func(_ context.Context, k int, _ *Restart) ([]Node, error) {
		return []Node{{Name: "node0", Runner: r0, Workers: 1, Job: job}, {Name: "node1", Runner: r1, Workers: 1, Job: job}}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), Options{Attempt: attempt, MaxRestarts: 1, Diag: io.Discard})
		done <- err
	}()
	time.Sleep(150 * ms) // node0's worker joined long ago; node1's joins at about 300 ms
	if n := r0.warmCount(); n != 0 {
		t.Errorf("node0 warmed %d times while node1's worker imported, want 0", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, r := range []*warmRunner{r0, r1} {
		if n := r.warmCount(); n != 1 {
			t.Errorf("%s warmed %d times once every worker joined, want once", r.name, n)
		}
	}
}

// TestRunWarmsEarly: a node with CPUs to spare (Node.WarmEarly) is asked
// to warm the next attempt as soon as its attempt has started, before its
// workers have joined the store, or even started; one without waits for
// the joins.
func TestRunWarmsEarly(t *testing.T) {
	for _, early := range []bool{true, false} {
		// torchrun's import, the workers' start, their imports, the joins.
		sc := script{after: 400 * ms, frames: []timedFrame{
			{100 * ms, started(0, 0)}, {ms, started(1, 1)}, {200 * ms, joined(0)}, {ms, joined(1)}}}
		r := &warmRunner{fakeRunner: &fakeRunner{name: "node0", sc: sc}}
		job := wire.Job{Argv: []string{"torchrun"}, Preimport: []string{"torch.distributed.run"}}
		attempt := func(_ context.Context, k int, _ *Restart) ([]Node, error) {
			return []Node{{Name: "node0", Runner: r, Workers: 2, WarmEarly: early, Job: job}}, nil
		}
		done := make(chan error, 1)
		go func() {
			_, err := Run(context.Background(), Options{Attempt: attempt, MaxRestarts: 1, Diag: io.Discard})
			done <- err
		}()
		// The agent started, no worker yet (the first comes at 100 ms).
		for start := time.Now(); r.warmCount() == 0 && time.Since(start) < 80*ms; time.Sleep(ms) {
		}
		if n, want := r.warmCount(), map[bool]int{true: 1, false: 0}[early]; n != want {
			t.Errorf("WarmEarly %v: warmed %d times while the workers import, want %d", early, n, want)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := r.warmCount(); n != 1 {
			t.Errorf("WarmEarly %v: warmed %d times in all, want once", early, n)
		}
	}
}

// aheadRunner is a warmRunner that takes jobs handed ahead.
type aheadRunner struct {
	*warmRunner
	ahead []wire.Job
}

func (a *aheadRunner) HandAhead(job wire.Job) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ahead = append(a.ahead, job)
	return true
}

// TestRunHandsAhead: where the first restart after a worker's failure
// would not pause, the next attempt's job (Options.Ahead) goes to the
// node's runner while the attempt runs, once its standby is in place
// (its workers past their imports), made as the attempt's start makes it
// (relayed); the timeline has the hand-off before the failure and the
// release after the stop. An attempt whose restart pauses first (the
// second) hands nothing ahead, and neither does the last attempt.
func TestRunHandsAhead(t *testing.T) {
	r := &aheadRunner{warmRunner: &warmRunner{fakeRunner: &fakeRunner{name: "node1"}}}
	job := wire.Job{Argv: []string{"torchrun"}, Preimport: []string{"torch.distributed.run"}}
	// The failure 100 ms after the join: the standby and the hand-off
	// ahead come before it, even on a loaded machine.
	fail := script{stopCode: 1, linger: 30 * ms, frames: []timedFrame{{ms, started(0, 0)}, {ms, joined(0)}, {100 * ms, exited(0, 0, 3, 0, false, time.Now())}}}
	attempt := func(_ context.Context, k int, _ *Restart) ([]Node, error) {
		r.sc = fail
		switch k {
		case 1: // the agent says it released the job handed ahead
			r.sc.frames = append([]timedFrame{{0, released()}}, fail.frames...)
		case 2:
			r.sc = script{after: 20 * ms, frames: []timedFrame{{ms, started(0, 0)}}}
		}
		return []Node{{Name: "node1", Runner: r, Workers: 1, Job: job}}, nil
	}
	var asked []int
	ahead := func(_ context.Context, k int) []Node {
		asked = append(asked, k) // one call at a time: the attempts follow each other
		return []Node{{Name: "node1", Runner: r, Workers: 1, Job: job}}
	}
	var diag syncBuffer
	res, err := Run(context.Background(), Options{Attempt: attempt, Ahead: ahead, MaxRestarts: 2, Backoff: 20 * ms, Diag: &diag})
	if err != nil || res.Attempts != 3 {
		t.Fatalf("Run = %+v, %v\n%s", res, err, diag.String())
	}
	if !slices.Equal(asked, []int{0}) {
		t.Errorf("Ahead asked for attempts %v, want only after attempt 0 (restart 2 pauses first)", asked)
	}
	r.mu.Lock()
	handed := r.ahead
	r.mu.Unlock()
	if len(handed) != 1 || !handed[0].Relay || handed[0].RelayEnd != wire.FrameExit {
		t.Fatalf("handed ahead %+v, want one job, relayed as an attempt starts it", handed)
	}
	if len(res.Restarts) != 2 {
		t.Fatalf("restarts %+v", res.Restarts)
	}
	first, second := res.Restarts[0], res.Restarts[1]
	if first.Ahead != 1 || first.AheadUsed != 1 || first.Handed >= 0 || first.Released < first.Stopped || first.WorkersUp < first.Released {
		t.Errorf("the first restart's timeline %+v: want handed ahead before the failure, released after the stop", first)
	}
	if line := first.String(); !strings.Contains(line, "failure seen, next torchrun handed its command line ") ||
		!strings.Contains(line, "ms before (ahead on 1 of 1 nodes), stopped +") || !strings.Contains(line, "longest: failure seen → stopped") {
		t.Errorf("the first restart's line: %s", line)
	}
	if second.Ahead != 0 || second.Released != 0 || second.Handed < second.Stopped {
		t.Errorf("the second restart's timeline %+v: nothing handed ahead", second)
	}
	if !strings.Contains(diag.String(), "(ahead on 1 of 1 nodes)") {
		t.Errorf("diag = %s", diag.String())
	}
}

// TestRunHandsAheadOnce: other failures that restart at once hand the
// next attempt's job ahead too, once, and it is released after the stop:
//   - at start-up: a worker that fails before every worker is past its
//     imports leaves the node without its standby until the stop starts
//     one, so its job is handed then, after the failure (neither worker
//     joined: the ended one counts as past its imports, the other not);
//   - at exit: one worker finished, the other then failed.
func TestRunHandsAheadOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []timedFrame
		check  func(t *testing.T, rs Restart, diag string)
	}{
		{"start-up crash", []timedFrame{{ms, started(0, 0)}, {ms, started(1, 1)}, {20 * ms, exited(1, 1, 3, 0, false, time.Now())}},
			func(t *testing.T, rs Restart, _ string) {
				if rs.Handed <= 0 {
					t.Errorf("handed at %v, want after the failure", rs.Handed)
				}
			}},
		{"at exit", []timedFrame{{ms, started(0, 0)}, {ms, started(1, 1)}, {ms, joined(0)}, {ms, joined(1)},
			{20 * ms, exited(0, 0, 0, 0, false, time.Now())}, {5 * ms, exited(1, 1, 3, 0, false, time.Now())}},
			func(t *testing.T, _ Restart, diag string) {
				if !strings.Contains(diag, "exited with 3 during exit (other workers had finished)") {
					t.Errorf("the failure was not one at exit:\n%s", diag)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &aheadRunner{warmRunner: &warmRunner{fakeRunner: &fakeRunner{name: "node1"}}}
			job := wire.Job{Argv: []string{"torchrun"}, Preimport: []string{"torch.distributed.run"}}
			node := []Node{{Name: "node1", Runner: r, Workers: 2, Job: job}}
			attempt := func(_ context.Context, k int, _ *Restart) ([]Node, error) {
				r.sc = script{stopCode: 1, linger: 30 * ms, frames: tc.frames}
				if k == 1 {
					r.sc = script{after: 20 * ms, frames: []timedFrame{{0, released()}, {ms, started(0, 0)}, {ms, started(1, 1)}}}
				}
				return node, nil
			}
			ahead := func(context.Context, int) []Node { return node }
			var diag syncBuffer
			res, err := Run(context.Background(), Options{Attempt: attempt, Ahead: ahead, MaxRestarts: 1, Diag: &diag})
			if err != nil || res.Attempts != 2 || len(res.Restarts) != 1 {
				t.Fatalf("Run = %+v, %v\n%s", res, err, diag.String())
			}
			r.mu.Lock()
			handed := len(r.ahead)
			r.mu.Unlock()
			rs := res.Restarts[0]
			if handed != 1 || rs.Ahead != 1 || rs.AheadUsed != 1 || rs.Released < rs.Stopped {
				t.Errorf("handed ahead %d times, the restart's timeline %+v: want once, released after the stop", handed, rs)
			}
			tc.check(t, rs, diag.String())
		})
	}
}
