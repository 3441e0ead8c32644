package job

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/wire"
	"github.com/gorun/gorun/sshexec"
)

// fakeRunner is a node that answers from scripts: Output and AgentOutput
// call the given functions (nil: empty output), Start returns a process
// that exits at once with the next code of codes (0 when they run out).
type fakeRunner struct {
	name   string
	output func(argv []string) ([]byte, error)
	agent  func(args []string) ([]byte, error)

	mu       sync.Mutex
	commands []string // every Output argv, joined by spaces
	codes    []int
	jobs     []wire.Job
	closed   bool
}

var _ sshexec.Runner = (*fakeRunner)(nil)

func (f *fakeRunner) Node() string { return f.name }
func (f *fakeRunner) Addr() string { return f.name + ":22" }

func (f *fakeRunner) Output(ctx context.Context, argv []string) ([]byte, error) {
	f.mu.Lock()
	f.commands = append(f.commands, strings.Join(argv, " "))
	f.mu.Unlock()
	if f.output == nil {
		return nil, nil
	}
	return f.output(argv)
}

func (f *fakeRunner) AgentOutput(ctx context.Context, args ...string) ([]byte, error) {
	if f.agent == nil {
		return nil, errors.New("no agent")
	}
	return f.agent(args)
}

func (f *fakeRunner) Start(ctx context.Context, job wire.Job, stdout, stderr io.Writer) (sshexec.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, job)
	code := 0
	if len(f.codes) > 0 {
		code, f.codes = f.codes[0], f.codes[1:]
	}
	return fakeProcess(code), nil
}

func (f *fakeRunner) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

type fakeProcess int

func (p fakeProcess) Wait() (int, error) { return int(p), nil }
func (fakeProcess) Stop(bool)            {}
func (fakeProcess) Tell(...byte)         {}

func (fakeProcess) Interrupt(syscall.Signal, time.Duration) {}
func (fakeProcess) Signal(syscall.Signal)                   {}

// parse is cmdline.Parse that fails the test on an error.
func parse(t interface {
	Helper()
	Fatalf(string, ...any)
}, args ...string) cmdline.CommandLine {
	t.Helper()
	cl, err := cmdline.Parse(args, func(string) string { return "" })
	if err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return cl
}

// env is a getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
