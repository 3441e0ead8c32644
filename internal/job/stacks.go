package job

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gorun/gorun/launch"
)

// hangStacks is the hook that keeps every rank's stacks of a hung attempt
// on the head (launch.Options.SaveStacks): DIR/attempt-K/stacks/, one
// file per rank (rank-4.txt, zero-padded to the widest rank) and
// summary.txt with the culprit lines, where DIR is --flight-recorder's
// folder when given, else this run's folder under the user's cache
// directory (gorun/runs/RUN-ID). The console shows the likely culprit's
// stack only.
type hangStacks struct {
	dir string // "" until a hang: the cache directory may not exist
	// runDir finds the folder when dir is "" (the user's cache directory).
	runDir func() (string, error)
}

func newHangStacks(flightRecorder, runID string) *hangStacks {
	return &hangStacks{dir: flightRecorder, runDir: func() (string, error) {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(cache, "gorun", "runs", runID), nil
	}}
}

func (*hangStacks) Name() string { return "hang stacks" }

func (h *hangStacks) Configure(o *launch.Options) { o.SaveStacks = h.save }

func (h *hangStacks) save(k int, ranks []launch.RankStacks, lines []string) (string, error) {
	dir := h.dir
	if dir == "" {
		d, err := h.runDir()
		if err != nil {
			return "", fmt.Errorf("find the run's folder: %w", err)
		}
		dir = d
	}
	dir = filepath.Join(dir, fmt.Sprintf("attempt-%d", k), "stacks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	width := 1
	for _, r := range ranks {
		width = max(width, len(strconv.Itoa(r.Rank)))
	}
	for _, r := range ranks {
		name := fmt.Sprintf("rank-%0*d.txt", width, r.Rank)
		if r.Rank < 0 {
			name = fmt.Sprintf("%s-local-rank-%d.txt", r.Node, r.LocalRank)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(stackFile(r)), 0o644); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// stackFile is one rank's file: who and by which dumper, then the dump as
// it was printed.
func stackFile(r launch.RankStacks) string {
	head := fmt.Sprintf("# %s rank %d (local rank %d)", r.Node, r.Rank, r.LocalRank)
	if r.Dump == nil {
		return head + ": no stacks came in time\n"
	}
	head += ", stacks by " + r.Dump.Tool
	if r.Dump.Trimmed {
		head += " (cut to fit one frame of the relay)"
	}
	text := r.Dump.Text
	if text == "" {
		text = "(the dumper printed nothing)\n"
	}
	return head + "\n\n" + text
}
