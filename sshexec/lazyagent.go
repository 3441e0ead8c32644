package sshexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gorun/gorun/internal/shell"
)

// A node usually has this gorun already (a content-addressed copy from an
// earlier run), so gorun does not ask first: it runs the copy through a
// launcher that looks for it, and uploads only when the launcher reports it
// missing. That saves an SSH session per node on every launch.

// launcherMissing is the launcher's exit code when the node lacks the copy.
const launcherMissing = 199

// launchCommand is the remote command that runs bin's copy with args:
// exit launcherMissing when it is not there; otherwise, with announce,
// first a line naming the copy on stdout (so a job's output follows it).
// With builds for other architectures (others), the node's uname -m picks
// the copy to run: a home shared by nodes of two architectures holds both.
func launchCommand(bin Binary, others []Binary, announce bool, args ...string) string {
	pick := ""
	if len(others) > 0 {
		pick = `case "$(uname -m)" in `
		for _, b := range others {
			var names []string
			for uname, goarch := range unameArch {
				if goarch == b.Arch {
					names = append(names, uname)
				}
			}
			if len(names) > 0 {
				slices.Sort(names)
				pick += strings.Join(names, "|") + `) shift; set -- ` + shell.Quote(b.Name) + ` "$@";; `
			}
		}
		pick += `esac; `
	}
	script := pick + `p="${XDG_CACHE_HOME:-$HOME/.cache}/gorun/$1"; shift; [ -x "$p" ] || exit ` + fmt.Sprint(launcherMissing) + `; `
	if announce {
		script += `printf '%s\n' "$p"; `
	}
	script += `exec "$p" "$@"`
	return shell.QuoteArgv(append([]string{"sh", "-c", script, "sh", bin.Name}, args...))
}

// readLauncherLine reads the launcher's first line byte by byte, so nothing
// of the job's output after it is consumed.
func readLauncherLine(r io.Reader) (string, error) {
	var line []byte
	var b [1]byte
	for len(line) < 4096 {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", fmt.Errorf("gorun is not on the node: %w", err)
		}
		if b[0] == '\n' {
			if !strings.HasPrefix(string(line), "/") {
				return "", fmt.Errorf("launcher said %q", line)
			}
			return string(line), nil
		}
		line = append(line, b[0])
	}
	return "", errors.New("launcher line too long")
}

// knowAgent records where the node's copy is, once a launcher named it.
func (r *Remote) knowAgent(path string) {
	r.upload.mu.Lock()
	defer r.upload.mu.Unlock()
	if r.upload.path == "" {
		r.upload.local, r.upload.path = r.cfg.Agent.Name, path
	}
}

// AgentOutput runs this gorun on the node with args (a hidden subcommand)
// and returns its stdout: the installed or uploaded copy when known, else
// through the launcher, uploading Config.Agent first when the node lacks it.
func (r *Remote) AgentOutput(ctx context.Context, args ...string) ([]byte, error) {
	if out, err, ok := r.warm.ask(ctx, r.node, args); ok {
		return out, err
	}
	if path := r.agentPath(); path != "" || r.cfg.Agent.Name == "" {
		if path == "" {
			return nil, fmt.Errorf("node %s: no gorun on the node: set --remote-gorun or Config.Agent", r.node)
		}
		return r.Output(ctx, append([]string{path}, args...))
	}
	out, err := r.outputCmd(ctx, launchCommand(r.cfg.Agent, r.cfg.Others, false, args...))
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != launcherMissing {
		if err != nil {
			return out, fmt.Errorf("node %s: %w", r.node, err)
		}
		return out, nil
	}
	if _, err := r.EnsureAgent(ctx, r.cfg.Agent); err != nil {
		return nil, err
	}
	return r.Output(ctx, append([]string{r.agentPath()}, args...))
}
