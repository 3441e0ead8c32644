package rank

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestWatchWrites: a worker that writes (to a file here, without printing
// anything) makes progress; one that only sleeps makes none.
func TestWatchWrites(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		progress bool
	}{
		{"writing a file", `while :; do echo checkpoint-bytes >> "$1"; sleep 0.2; done`, true},
		{"asleep", `sleep 30`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tt.script, "sh", filepath.Join(t.TempDir(), "ckpt"))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			if _, ok := writtenBytes(cmd.Process.Pid); !ok {
				t.Fatalf("/proc/%d/io has no wchar", cmd.Process.Pid)
			}
			w, r := relayWorker(t, "")
			ctx, cancel := context.WithTimeout(t.Context(), pollEvery*5/2)
			defer cancel()
			w.watch(ctx, cmd.Process.Pid, "", 0)
			w.conn.Close()
			_, _, _, _, kinds := r.collect(t)
			if got := strings.ContainsRune(kinds, rune(wire.FrameProgress)); got != tt.progress {
				t.Errorf("frames %q: progress %v, want %v", kinds, got, tt.progress)
			}
		})
	}
}

// TestWrittenBytesGone: a process that is gone has no count.
func TestWrittenBytesGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if _, ok := writtenBytes(cmd.Process.Pid); ok {
		t.Error("a reaped process still has a write count")
	}
}
