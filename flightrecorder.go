package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/internal/shell"
	"github.com/gorun/gorun/sshexec"
)

// runID names what one run keeps on the nodes.
func runID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// gatherTimeout bounds fetching one node's flight-recorder dumps.
const gatherTimeout = 30 * time.Second

// maxDumps bounds what one node's dumps may hold on the head.
const maxDumps = 1 << 30

// gatherFlightRecorder moves attempt k's flight-recorder dumps from every
// node of the plan to DIR/attempt-k/NODE on the head and clears the nodes'
// folders, so the next attempt starts empty. A node it cannot reach keeps
// its dumps; gorun says so.
func gatherFlightRecorder(ctx context.Context, dir, runID string, k int, plan envplan.Plan, runners map[string]sshexec.Runner, diag io.Writer) {
	files, nodes := 0, 0
	for _, n := range plan.Nodes {
		src := envplan.FlightRecorderDir(runID, n.Host)
		r := runners[n.Host]
		if r == nil {
			continue
		}
		dst := filepath.Join(dir, fmt.Sprintf("attempt-%d", k), n.Host)
		got, err := fetchDumps(ctx, r, src, dst)
		if err != nil {
			fmt.Fprintf(diag, "gorun: flight recorder: %s: %v (the dumps stay in %s there)\n", n.Host, err, src)
			continue
		}
		if got > 0 {
			files, nodes = files+got, nodes+1
		}
	}
	if files > 0 {
		fmt.Fprintf(diag, "gorun: flight recorder: %d dumps from %d nodes of attempt %d in %s (read them with PyTorch's fr_trace)\n",
			files, nodes, k+1, filepath.Join(dir, fmt.Sprintf("attempt-%d", k)))
	}
}

// fetchDumps copies the files of folder src on the node into dst and
// removes src there. It returns how many files it copied.
func fetchDumps(ctx context.Context, r sshexec.Runner, src, dst string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, gatherTimeout)
	defer cancel()
	// tar fails where src does not exist: no worker ran there, or none
	// wrote; that is not an error.
	// The run's folder goes too once its last node's folder is gone.
	script := "cd " + shell.Quote(src) + " 2>/dev/null || exit 0; tar -cf - . && cd / && rm -rf " + shell.Quote(src) +
		" && rmdir " + shell.Quote(filepath.Dir(src)) + " 2>/dev/null; exit 0"
	out, err := r.Output(ctx, []string{"sh", "-c", script})
	if err != nil {
		return 0, err
	}
	if len(out) == 0 {
		return 0, nil
	}
	return untar(out, dst)
}

// untar writes the regular files of a tar archive into dst, refusing any
// name that would leave it.
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
