package sshexec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/agent"
	"github.com/gorun/gorun/internal/wire"
)

// testAgentEnv makes the test binary act as the agent (helper-process
// pattern), so these tests need no gorun binary.
const testAgentEnv = "GORUN_TEST_AGENT"

// testHeadEnv makes the test binary act as a head: it starts the job in
// $GORUN_TEST_JOB through Local and waits, so a test can kill a real head.
const testHeadEnv = "GORUN_TEST_HEAD"

func TestMain(m *testing.M) {
	// An agent may run its own binary for an ask (standbyask.go): with
	// both variables set, the agent is the one started as `_agent`.
	if os.Getenv(testAgentOutputEnv) == "1" && len(os.Args) > 1 && os.Args[1] != wire.AgentCommand {
		os.Exit(agentOutputHelper(os.Args[1:]))
	}
	if os.Getenv(testAgentEnv) == "1" {
		signal.Ignore(os.Interrupt) // as gorun's main does before ServeAgent
		os.Exit(agent.ServeAgent(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv(testAgentEnv) == "sidecar" {
		os.Exit(agent.ServeAgentWith(context.Background(), testSidecar, os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv(testHeadEnv) == "1" {
		os.Exit(serveTestHead())
	}
	if os.Getenv("GORUN_TEST_RELAY_CLIENT") == "1" {
		os.Exit(relayClient())
	}
	if os.Getenv(testPoolEnv) == "1" {
		os.Exit(poolHelper())
	}
	if os.Getenv(testAgentOutputEnv) == "1" {
		os.Exit(agentOutputHelper(os.Args[1:]))
	}
	if os.Getenv(testSSHServersEnv) != "" {
		os.Exit(sshServersHelper())
	}
	os.Exit(m.Run())
}

func serveTestHead() int {
	var job wire.Job
	if err := json.Unmarshal([]byte(os.Getenv("GORUN_TEST_JOB")), &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	l := NewLocal(os.Args[0])
	l.agentEnv = append(os.Environ(), testHeadEnv+"=0", testAgentEnv+"=1")
	p, err := l.Start(context.Background(), job, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	code, err := p.Wait()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return code
}

// treeScript starts a process tree shaped like torchrun's: the main process
// starts $WORKERS workers, each in a session of its own, ignoring SIGTERM
// and with a child of its own. Every pid goes to $PIDS. With $MAIN_EXIT set
// the main process exits with that code once the workers run, leaving them
// behind as a crashed torchrun would.
const treeScript = `
case "$1" in
main)
	echo $$ >>"$PIDS"
	n=${WORKERS:-2}
	i=0
	while [ $i -lt $n ]; do
		setsid /bin/sh "$0" worker &
		i=$((i+1))
	done
	if [ -n "$MAIN_EXIT" ]; then
		while [ "$(wc -l <"$PIDS")" -lt $((1 + 2*n)) ]; do sleep 0.05; done
		exit "$MAIN_EXIT"
	fi
	wait
	;;
worker)
	trap '' TERM
	sleep 300 &
	echo $! >>"$PIDS"
	echo $$ >>"$PIDS"
	wait
	;;
esac
`

// tree is one treeScript job and where it records its pids.
type tree struct {
	job  wire.Job
	pids string
	want int // pids recorded once the whole tree runs
}

func newTree(t *testing.T, workers int, env map[string]string) tree {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "tree.sh")
	if err := os.WriteFile(script, []byte(treeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	pids := filepath.Join(dir, "pids")
	if err := os.WriteFile(pids, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := map[string]string{"PIDS": pids, "WORKERS": strconv.Itoa(workers)}
	for k, v := range env {
		e[k] = v
	}
	return tree{
		job:  wire.Job{Argv: []string{"/bin/sh", script, "main"}, Env: e},
		pids: pids,
		want: 1 + 2*workers,
	}
}

// waitRunning waits until the whole tree has recorded its pids.
func (tr tree) waitRunning(t *testing.T) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := readPids(t, tr.pids)
		if len(pids) >= tr.want {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("tree did not start: %d of %d pids recorded", len(pids), tr.want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			continue // a line being written
		}
		pids = append(pids, n)
	}
	return pids
}

// livePids returns the pids that still exist, zombies included: the agent
// must have reaped everything before it exits.
func livePids(pids []int) []int {
	var live []int
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			live = append(live, pid)
		}
	}
	return live
}

// killLeftovers keeps a failing test from leaving processes behind.
func killLeftovers(t *testing.T, path string) {
	t.Cleanup(func() {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// rawAgent is an agent driven byte by byte, as a head would.
type rawAgent struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr bytes.Buffer
	done           chan struct{}
	code           int
}

func startRawAgent(t *testing.T, job wire.Job) *rawAgent {
	t.Helper()
	a := &rawAgent{done: make(chan struct{})}
	a.cmd = exec.Command(os.Args[0], wire.AgentCommand)
	a.cmd.Env = append(os.Environ(), testAgentEnv+"=1")
	a.cmd.Stdout, a.cmd.Stderr = &a.stdout, &a.stderr
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Only a broken agent leaves processes holding its output pipes; then
	// the test should fail, not hang.
	a.cmd.WaitDelay = 2 * time.Second
	var err error
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	})
	go func() {
		_ = a.cmd.Wait()
		a.code = a.cmd.ProcessState.ExitCode()
		close(a.done)
	}()
	if job.Argv != nil {
		line, err := jobLine(job)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.stdin.Write(append(line, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *rawAgent) send(t *testing.T, msg ...byte) {
	t.Helper()
	if _, err := a.stdin.Write(msg); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the agent to exit, at most limit.
func (a *rawAgent) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-a.done:
		return a.code
	case <-time.After(limit):
		t.Fatalf("agent still running after %v; stderr: %s", limit, a.stderr.String())
		return -1
	}
}

// TestAgentProtocolMismatch: a job line from a head of another protocol
// version (or of none: a gorun older than the check) is refused before
// anything starts, with one line that names both versions and the fix.
func TestAgentProtocolMismatch(t *testing.T) {
	t.Parallel()
	for _, head := range []int{0, wire.Protocol + 1} {
		t.Run(fmt.Sprint(head), func(t *testing.T) {
			t.Parallel()
			a := startRawAgent(t, wire.Job{})
			line := fmt.Sprintf(`{"protocol":%d,"argv":["/bin/sh","-c","echo ran"]}`, head)
			if head == 0 {
				line = `{"argv":["/bin/sh","-c","echo ran"]}`
			}
			if _, err := io.WriteString(a.stdin, line+"\n"); err != nil {
				t.Fatal(err)
			}
			if got := a.wait(t, 10*time.Second); got != agent.ExitBadSpec || a.stdout.Len() != 0 {
				t.Errorf("exit code = %d, stdout %q; want %d and nothing run", got, a.stdout.String(), agent.ExitBadSpec)
			}
			want := "gorun agent: " + wire.ProtocolMismatch(head, wire.Protocol) + "\n"
			if a.stderr.String() != want {
				t.Errorf("stderr = %q, want %q", a.stderr.String(), want)
			}
			for _, v := range []string{fmt.Sprintf("protocol %d", head), fmt.Sprintf("protocol %d", wire.Protocol), "--remote-gorun"} {
				if !strings.Contains(want, v) {
					t.Errorf("%q does not say %q", want, v)
				}
			}
		})
	}
}

func TestAgentExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		job        wire.Job
		raw        string // sent instead of the job when set
		want       int
		wantStderr string
	}{
		{name: "zero", job: wire.Job{Argv: []string{"/bin/sh", "-c", "exit 0"}}, want: 0},
		{name: "three", job: wire.Job{Argv: []string{"/bin/sh", "-c", "exit 3"}}, want: 3},
		{name: "255", job: wire.Job{Argv: []string{"/bin/sh", "-c", "exit 255"}}, want: 255},
		{name: "sigkill", job: wire.Job{Argv: []string{"/bin/sh", "-c", "kill -9 $$"}}, want: 128 + 9},
		{name: "sigterm", job: wire.Job{Argv: []string{"/bin/sh", "-c", "kill -TERM $$"}}, want: 128 + 15},
		{name: "path from job env", job: wire.Job{Argv: []string{"true"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}, want: 0},
		{
			// The job starts with no signal ignored or blocked, whatever the
			// agent does with signals itself.
			name: "default signal dispositions",
			job:  wire.Job{Argv: []string{"/bin/sh", "-c", `grep -Eq '^SigIgn:[[:space:]]*0+$' /proc/self/status && grep -Eq '^SigBlk:[[:space:]]*0+$' /proc/self/status`}},
			want: 0,
		},
		{name: "dir", job: wire.Job{Argv: []string{"/bin/sh", "-c", `test "$(pwd)" = /tmp`}, Dir: "/tmp"}, want: 0},
		{
			name: "missing program", job: wire.Job{Argv: []string{"gorun-no-such-program"}},
			want: agent.ExitNoStart, wantStderr: "gorun agent: start gorun-no-such-program: ",
		},
		{
			name: "missing dir", job: wire.Job{Argv: []string{"/bin/true"}, Dir: "/nonexistent/dir"},
			want: agent.ExitNoStart, wantStderr: "gorun agent: start /bin/true: ",
		},
		{name: "bad json", raw: "{argv\n", want: agent.ExitBadSpec, wantStderr: "gorun agent: read job: "},
		{name: "empty argv", raw: fmt.Sprintf(`{"protocol":%d}`+"\n", wire.Protocol), want: agent.ExitBadSpec, wantStderr: "empty argv"},
		{name: "no job line", raw: "", want: agent.ExitBadSpec, wantStderr: "gorun agent: read job: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := tc.job
			if tc.raw != "" || job.Argv == nil {
				job = wire.Job{}
			}
			a := startRawAgent(t, job)
			if tc.raw != "" {
				if _, err := io.WriteString(a.stdin, tc.raw); err != nil {
					t.Fatal(err)
				}
			}
			if tc.job.Argv == nil {
				a.stdin.Close()
			}
			got := a.wait(t, 10*time.Second)
			if got != tc.want {
				t.Errorf("exit code = %d, want %d; stderr: %s", got, tc.want, a.stderr.String())
			}
			if !strings.Contains(a.stderr.String(), tc.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", a.stderr.String(), tc.wantStderr)
			}
			if tc.wantStderr == "" && a.stderr.Len() > 0 {
				t.Errorf("unexpected stderr: %q", a.stderr.String())
			}
			if a.stdout.Len() > 0 {
				t.Errorf("agent wrote to stdout: %q", a.stdout.String())
			}
		})
	}
}

// TestAgentHeadLost covers the ways a head can go away or ask for a stop
// while the job's workers ignore SIGTERM in sessions of their own.
func TestAgentHeadLost(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	tests := []struct {
		name string
		act  func(t *testing.T, a *rawAgent)
		// The tree must be gone after at least min and at most max.
		min, max time.Duration
		want     int
	}{
		{
			name: "stdin closed",
			act:  func(t *testing.T, a *rawAgent) { a.stdin.Close() },
			min:  grace, max: grace + time.Second, want: 143,
		},
		{
			name: "graceful stop",
			act:  func(t *testing.T, a *rawAgent) { a.send(t, appendTerm(nil, false, 0, 0)...) },
			min:  grace, max: grace + time.Second, want: 143,
		},
		{
			name: "kill now",
			act:  func(t *testing.T, a *rawAgent) { a.send(t, wire.CtlKill) },
			min:  0, max: grace / 2, want: 137,
		},
		{
			name: "kill during grace",
			act: func(t *testing.T, a *rawAgent) {
				a.send(t, appendTerm(nil, false, 0, 0)...)
				time.Sleep(grace / 4)
				a.send(t, wire.CtlKill)
			},
			min: 0, max: grace * 3 / 4, want: 143,
		},
		{
			name: "heartbeat missed",
			act:  func(t *testing.T, a *rawAgent) {}, // stdin stays open, silent
			// Heartbeat is 1s, counted from the job line.
			min: grace, max: time.Second + grace + time.Second, want: 143,
		},
		{
			name: "agent sigterm",
			act: func(t *testing.T, a *rawAgent) {
				if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			},
			min: grace, max: grace + time.Second, want: 143,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t, 2, nil)
			killLeftovers(t, tr.pids)
			tr.job.Grace = grace
			tr.job.Heartbeat = time.Second
			a := startRawAgent(t, tr.job)
			// Keep the agent alive until the tree runs.
			stopBeat := make(chan struct{})
			beatDone := make(chan struct{})
			go func() {
				defer close(beatDone)
				tick := time.NewTicker(200 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stopBeat:
						return
					case <-tick.C:
						_, _ = a.stdin.Write([]byte{wire.CtlHeartbeat})
					}
				}
			}()
			pids := tr.waitRunning(t)
			close(stopBeat)
			<-beatDone
			start := time.Now()
			tc.act(t, a)
			got := a.wait(t, tc.max+2*time.Second)
			took := time.Since(start)
			if live := livePids(pids); len(live) > 0 {
				t.Errorf("processes left after the agent exited: %v", live)
			}
			if got != tc.want {
				t.Errorf("exit code = %d, want %d; stderr: %s", got, tc.want, a.stderr.String())
			}
			if took < tc.min*9/10 || took > tc.max {
				t.Errorf("tree gone after %v, want between %v and %v", took, tc.min, tc.max)
			}
			if a.stdout.Len() > 0 {
				t.Errorf("agent wrote to stdout: %q", a.stdout.String())
			}
		})
	}
}

// TestAgentHeadKilled: SIGKILL a real head that started the job through
// Local. Its agent sees EOF and tears the tree down; nothing else tells it.
// The agent then writes its note to a stderr nobody reads any more, which
// must not kill it before it has cleaned up.
func TestAgentHeadKilled(t *testing.T) {
	t.Parallel()
	const grace = 500 * time.Millisecond
	tr := newTree(t, 2, nil)
	killLeftovers(t, tr.pids)
	tr.job.Grace = grace
	spec, err := json.Marshal(tr.job)
	if err != nil {
		t.Fatal(err)
	}
	head := exec.Command(os.Args[0])
	head.Env = append(os.Environ(), testHeadEnv+"=1", "GORUN_TEST_JOB="+string(spec))
	stderr, err := head.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := head.Start(); err != nil {
		t.Fatal(err)
	}
	pids := tr.waitRunning(t)
	agentPid := 0
	for _, pid := range childrenOf(head.Process.Pid) {
		agentPid = pid
	}
	if agentPid == 0 {
		t.Fatal("no agent under the head")
	}
	start := time.Now()
	if err := head.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = stderr.Close() // the head's end of the agent's stderr is gone too
	_ = head.Wait()
	// The agent's own zombie is init's to reap, which may take a while;
	// everything under it must be gone entirely.
	agentRunning := func() []int {
		if state, _, ok := stateAndParent(agentPid); !ok || state == 'Z' {
			return nil
		}
		return []int{agentPid}
	}
	left := func() []int { return append(agentRunning(), livePids(pids)...) }
	deadline := start.Add(grace + time.Second)
	for len(left()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if live := left(); len(live) > 0 {
		t.Errorf("still there %v after the head died (agent %d): %v", time.Since(start), agentPid, live)
		_ = syscall.Kill(agentPid, syscall.SIGKILL)
	}
}

// TestAgentHeartbeatKeepsJob checks that heartbeats, not luck, keep a job
// running past its heartbeat timeout.
func TestAgentHeartbeatKeepsJob(t *testing.T) {
	t.Parallel()
	job := wire.Job{
		Argv:      []string{"/bin/sh", "-c", "sleep 2; exit 7"},
		Heartbeat: 500 * time.Millisecond,
		Grace:     200 * time.Millisecond,
	}
	a := startRawAgent(t, job)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			_, _ = a.stdin.Write([]byte{wire.CtlHeartbeat})
			continue
		case <-a.done:
		}
		break
	}
	if a.code != 7 {
		t.Fatalf("exit code = %d, want 7 (the job's own); stderr: %s", a.code, a.stderr.String())
	}
}

// TestAgentOrphansKilled: when the job's main process exits by itself (a
// crashed torchrun), workers it left behind are still killed, and the job's
// own exit code is returned.
func TestAgentOrphansKilled(t *testing.T) {
	t.Parallel()
	tr := newTree(t, 2, map[string]string{"MAIN_EXIT": "5"})
	killLeftovers(t, tr.pids)
	tr.job.Grace = 500 * time.Millisecond
	a := startRawAgent(t, tr.job)
	got := a.wait(t, 10*time.Second)
	pids := readPids(t, tr.pids)
	if len(pids) != tr.want {
		t.Fatalf("recorded %d pids, want %d", len(pids), tr.want)
	}
	if live := livePids(pids); len(live) > 0 {
		t.Errorf("processes left after the agent exited: %v", live)
	}
	if got != 5 {
		t.Errorf("exit code = %d, want 5; stderr: %s", got, a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "gorun agent: job exited, leaving processes behind") {
		t.Errorf("stderr = %q, want a note about the leftovers", a.stderr.String())
	}
}

// TestAgentReapsOrphans: short-lived processes reparented to the agent are
// reaped while the job runs, so no zombie piles up.
func TestAgentReapsOrphans(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "spawned")
	script := `for i in 1 2 3 4 5; do (setsid sleep 0.1 &); done; : >"$MARKER"; sleep 3`
	a := startRawAgent(t, wire.Job{Argv: []string{"/bin/sh", "-c", script}, Env: map[string]string{"MARKER": marker}})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job did not spawn its orphans")
		}
		time.Sleep(20 * time.Millisecond)
	}
	agentPid := a.cmd.Process.Pid
	// The orphans live 0.1 s; give the agent time to see them exit.
	time.Sleep(time.Second)
	children := childrenOf(agentPid)
	for _, pid := range children {
		if state, _, _ := stateAndParent(pid); state == 'Z' {
			t.Errorf("zombie child %d of the agent", pid)
		}
	}
	if len(children) != 1 {
		t.Errorf("agent has %d children, want 1 (the job's sh)", len(children))
	}
	a.send(t, wire.CtlKill)
	if got := a.wait(t, 5*time.Second); got != 137 {
		t.Errorf("exit code = %d, want 137", got)
	}
}
