package job

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/internal/userr"
	"github.com/gorun/gorun/launch"
	"github.com/gorun/gorun/sshexec"
)

// gatherTimeout bounds fetching one node's flight-recorder dumps.
const gatherTimeout = 30 * time.Second

// maxDumps bounds what one node's dumps may hold on the head.
const maxDumps = 1 << 30

// flightRecorder is the hook that moves each failed attempt's
// flight-recorder dumps (--flight-recorder DIR) from every node to
// DIR/attempt-K/NODE on the head, before the next attempt and after the
// last one, and clears the nodes' folders, so the next attempt starts
// empty. A node's dumps are removed there only once the head holds them;
// a node it cannot reach or whose dumps it cannot write keeps them, and
// gorun says where.
type flightRecorder struct {
	dir     string
	runID   string
	runners map[string]sshexec.Runner
	diag    io.Writer
}

func (*flightRecorder) Name() string { return "flight recorder" }

// BeforeAttempt gathers the previous attempt's dumps, from the nodes of
// that attempt's plan (the recheck that follows may drop one of them).
func (fr *flightRecorder) BeforeAttempt(ctx context.Context, a *Attempt) error {
	if a.K > 0 {
		fr.gather(ctx, a.K-1, a.Plan)
	}
	return nil
}

// Finish gathers the last attempt's dumps (none after a success) and
// clears the nodes' folders, whatever the end.
func (fr *flightRecorder) Finish(ctx context.Context, a *Attempt, res launch.Result, _ error) error {
	if res.Attempts > 0 {
		fr.gather(ctx, res.Attempts-1, a.Plan)
	}
	return nil
}

func (fr *flightRecorder) gather(ctx context.Context, k int, plan envplan.Plan) {
	files, nodes := 0, 0
	attemptDir := filepath.Join(fr.dir, fmt.Sprintf("attempt-%d", k))
	for _, n := range plan.Nodes {
		r := fr.runners[n.Host]
		if r == nil {
			continue
		}
		src := envplan.FlightRecorderDir(fr.runID, n.Host)
		got, err := fetchDumps(ctx, r, src, filepath.Join(attemptDir, n.Host))
		if err != nil {
			fmt.Fprintf(fr.diag, "gorun: flight recorder: %s: %v (the dumps stay in %s there)\n", n.Host, userr.Printable(err.Error()), src)
			continue
		}
		if got > 0 {
			files, nodes = files+got, nodes+1
		}
	}
	if files > 0 {
		fmt.Fprintf(fr.diag, "gorun: flight recorder: %d dumps from %d nodes of attempt %d in %s (read them with PyTorch's fr_trace)\n",
			files, nodes, k+1, attemptDir)
	}
}

// fetchDumps copies the files of folder src on the node into dst, then,
// only once they are all written, removes src there (and the run's folder
// once its last node's folder is gone). It returns how many files it
// copied.
func fetchDumps(ctx context.Context, r sshexec.Runner, src, dst string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, gatherTimeout)
	defer cancel()
	// tar fails where src does not exist: no worker ran there, or none
	// wrote; that is not an error.
	out, err := r.Output(ctx, []string{"sh", "-c", "cd " + shell.Quote(src) + " 2>/dev/null || exit 0; exec tar -cf - ."})
	if err != nil {
		return 0, err
	}
	if len(out) == 0 {
		return 0, nil
	}
	n, err := untar(out, dst)
	if err != nil {
		return n, err
	}
	clear := "rm -rf " + shell.Quote(src) + " && rmdir " + shell.Quote(filepath.Dir(src)) + " 2>/dev/null; exit 0"
	if _, err := r.Output(ctx, []string{"sh", "-c", clear}); err != nil {
		return n, fmt.Errorf("copied %d dumps to %s, but could not clear the node's folder: %w", n, dst, err)
	}
	return n, nil
}

// untar writes the regular files of a tar archive into dst, refusing any
// name that would leave it, and more than maxDumps bytes.
func untar(archive []byte, dst string) (int, error) {
	tr := tar.NewReader(bytes.NewReader(archive))
	n, total := 0, int64(0)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read the dumps: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return n, fmt.Errorf("read the dumps: %q leaves the folder", h.Name)
		}
		if total += h.Size; total > maxDumps {
			return n, fmt.Errorf("read the dumps: more than %d bytes", maxDumps)
		}
		path := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return n, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return n, err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return n, err
		}
		n++
	}
}
