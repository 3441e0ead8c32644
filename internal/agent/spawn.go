package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/gorun/gorun/internal/wire"
	"golang.org/x/sys/unix"
)

// Starting the job's main process: in a new session, with the job's
// environment on top of the agent's (less what Slurm says of the agent's
// own step), found on the job's PATH.

// startedJob is a job whose main process runs.
type startedJob struct {
	pid    int
	copies sync.WaitGroup
}

// wait waits for the output copies, if any were needed; they end once the
// last process holding the pipes is gone.
func (s *startedJob) wait() { s.copies.Wait() }

// spawnJob forks and execs the job in a new session. Stdout and stderr are
// passed as they are when they are files, so the agent copies nothing;
// other writers get a pipe and a copying goroutine.
func spawnJob(job wire.Job, stdout, stderr io.Writer) (*startedJob, error) {
	env, err := mergeEnv(withoutStepVars(os.Environ()), job.Env)
	if err != nil {
		return nil, err
	}
	path, err := lookPath(job.Argv[0], envValue(env, "PATH"), job.Dir)
	if err != nil {
		return nil, err
	}
	return forkExec(path, job.Argv, env, job.Dir, job.Stdin, stdout, stderr)
}

// forkExec starts path with argv in a new session, stdin as given (nil:
// /dev/null), and the extra files as fds 3 and up.
func forkExec(path string, argv, env []string, dir string, stdin *os.File, stdout, stderr io.Writer, extra ...*os.File) (*startedJob, error) {
	if stdin == nil {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		defer devnull.Close()
		stdin = devnull
	}

	s := &startedJob{}
	var closeAfterFork []*os.File
	fd := func(w io.Writer) (uintptr, error) {
		if f, ok := w.(*os.File); ok {
			return f.Fd(), nil
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		closeAfterFork = append(closeAfterFork, pw)
		s.copies.Add(1)
		go func() {
			defer s.copies.Done()
			defer pr.Close()
			_, _ = io.Copy(w, pr)
		}()
		return pw.Fd(), nil
	}
	outFd, err := fd(stdout)
	if err == nil {
		var errFd uintptr
		errFd, err = fd(stderr)
		if err == nil {
			files := []uintptr{stdin.Fd(), outFd, errFd}
			for _, f := range extra {
				files = append(files, f.Fd())
			}
			s.pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
				Dir:   dir,
				Env:   env,
				Files: files,
				// Killed with the agent: nothing of a job outlives it.
				Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
			})
		}
	}
	for _, f := range closeAfterFork {
		f.Close()
	}
	if err != nil {
		s.copies.Wait() // the write ends are closed, so the copies end
		return nil, err
	}
	return s, nil
}

// mergeEnv returns base with the variables of over added or replaced, over
// sorted by name so the result does not depend on map order.
func mergeEnv(base []string, over map[string]string) ([]string, error) {
	keys := make([]string, 0, len(over))
	for k, v := range over {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("environment variable name %q is invalid", k)
		}
		if strings.ContainsRune(v, 0) {
			// The value may be a secret: name the variable only.
			return nil, fmt.Errorf("environment variable %s contains a NUL byte", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(base)+len(keys))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; ok {
			continue
		}
		env = append(env, kv)
	}
	for _, k := range keys {
		env = append(env, k+"="+over[k])
	}
	return env, nil
}

// withoutStepVars drops from an agent step's environment what Slurm says
// about the agent as that one-task step's task (SLURM_PROCID=0,
// SLURM_NTASKS=1, ...): the job's workers are not its tasks, and a
// framework that reads them (PyTorch Lightning's Slurm detection) would
// take every worker for rank 0 of 1. What is true of the workers too
// stays: the allocation (SLURM_JOB_*) and the step they run in
// (SLURM_STEP_ID). Other agents' environments are kept as they are.
func withoutStepVars(env []string) []string {
	if envValue(env, wire.AgentStepVar) == "" {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == wire.AgentStepVar || isStepVar(k) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// isStepVar reports whether a variable describes the task srun started,
// rather than the allocation or the step.
func isStepVar(k string) bool {
	switch k {
	case "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
		"SLURM_NNODES", "SLURM_TASK_PID", "SLURM_TASKS_PER_NODE", "SLURM_GTIDS",
		"SLURM_DISTRIBUTION", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_PRIO_PROCESS",
		"SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT", "SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST",
		"SLURM_CPU_BIND_TYPE", "SLURM_CPU_BIND_VERBOSE", "SLURM_UMASK", "SLURM_NODELIST":
		return true
	}
	return false
}

// envValue returns the last value of name in env, as the C library does
// not promise which one but a shell export of it wins.
func envValue(env []string, name string) string {
	val := ""
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val = v
		}
	}
	return val
}

// lookPath finds file the way a shell would with the job's own PATH (not
// the agent's); names with a slash are used as they are, relative to dir.
func lookPath(file, pathEnv, dir string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		check := p
		if !filepath.IsAbs(p) && dir != "" {
			check = filepath.Join(dir, p)
		}
		if fi, err := os.Stat(check); err == nil && fi.Mode().IsRegular() && unix.Access(check, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in $PATH: %w", os.ErrNotExist)
}
