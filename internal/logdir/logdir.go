// Package logdir keeps torchrun's --log-dir one run folder across
// gorun's restarts, as torchrun's own restarts write it:
// DIR/<run>/attempt_0, attempt_1, ... Each gorun attempt is a fresh
// torchrun (with --max-restarts=0), which makes a folder of its own
// (DIR/<rdzv id>_<random>/attempt_0); on the node, the first attempt's
// folder is the run's, and each later attempt's attempt_0 is seen there
// as attempt_K (a link while the attempt runs, moved there once its
// torchrun has ended).
//
// Node side: a worker's supervisor (local rank 0) calls Begin before its
// worker starts; the node's agent calls Finish once its torchrun has
// ended.
package logdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Marker is the file in the run's folder that names the run and the
// node, so that a later attempt on the node finds the folder.
const Marker = ".gorun-run"

// pendingFile is the move Begin leaves for Finish, in the agent's folder.
const pendingFile = "logdir-move.json"

// move is an attempt's folder to put in the run's once its torchrun ends.
type move struct {
	From   string `json:"from"`   // the attempt's torchrun's attempt_0
	To     string `json:"to"`     // attempt_K in the run's folder (a link to From until then)
	Folder string `json:"folder"` // From's folder, removed once empty
}

// Begin places the attempt whose worker torchrun gave errorFile
// (TORCHELASTIC_ERROR_FILE: DIR/<folder>/attempt_0/<local rank>/error.json)
// when DIR is logDir, the --log-dir given (relative to the working
// directory): attempt 0's folder is marked the run's (runID, on host);
// a later attempt k's attempt_0 is linked from the run's folder as
// attempt_k, and the move is left in agentDir for Finish. Nothing is done
// where torchrun wrote elsewhere (no --log-dir: its temporary folder).
func Begin(errorFile, logDir, runID, host string, k int, agentDir string) error {
	if errorFile == "" || logDir == "" || runID == "" {
		return nil
	}
	attempt := filepath.Dir(filepath.Dir(errorFile))
	folder := filepath.Dir(attempt)
	dir, err := filepath.Abs(logDir)
	if err != nil || filepath.Base(attempt) != "attempt_0" || filepath.Clean(filepath.Dir(folder)) != dir {
		return nil
	}
	tag := runID + " " + host + "\n"
	run := ""
	if k > 0 {
		run = findRun(dir, tag)
	}
	if run == "" {
		// The first attempt, or a node new to the run (a spare): its
		// folder is the run's on this node.
		if err := os.WriteFile(filepath.Join(folder, Marker), []byte(tag), 0o644); err != nil {
			return err
		}
		if k == 0 {
			return nil
		}
		run = folder
	}
	to := filepath.Join(run, fmt.Sprintf("attempt_%d", k))
	if err := os.Symlink(attempt, to); err != nil {
		return err
	}
	b, _ := json.Marshal(move{From: attempt, To: to, Folder: folder})
	return os.WriteFile(filepath.Join(agentDir, pendingFile), b, 0o600)
}

// findRun is the folder in dir whose Marker says tag; "" when none.
func findRun(dir, tag string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), Marker)); err == nil && string(b) == tag {
			return filepath.Join(dir, e.Name())
		}
	}
	return ""
}

// Finish moves the attempt Begin left in agentDir into the run's folder,
// replacing the link, and removes the attempt's own folder once empty.
// Nothing to do is no error.
func Finish(agentDir string) error {
	b, err := os.ReadFile(filepath.Join(agentDir, pendingFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var m move
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if fi, err := os.Lstat(m.To); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(m.To); err != nil {
			return err
		}
	}
	if m.From != m.To {
		if err := os.Rename(m.From, m.To); err != nil {
			return err
		}
	}
	if m.Folder != filepath.Dir(m.To) {
		if err := os.Remove(m.Folder); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			return err
		}
	}
	return os.Remove(filepath.Join(agentDir, pendingFile))
}
