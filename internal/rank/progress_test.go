package rank

import (
	"context"
	"net"
	"os"
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
			w.watch(ctx, cmd.Process.Pid, watched{}, 0)
			w.conn.Close()
			_, _, _, _, kinds := r.collect(t)
			if got := strings.ContainsRune(kinds, rune(wire.FrameProgress)); got != tt.progress {
				t.Errorf("frames %q: progress %v, want %v", kinds, got, tt.progress)
			}
		})
	}
}

// TestWatchTouches: a touch of $GORUN_CHECKPOINT_FILE is a checkpoint
// frame, once per touch; one of $GORUN_HEARTBEAT_FILE is progress; an
// untouched file says nothing.
func TestWatchTouches(t *testing.T) {
	dir := t.TempDir()
	files := watched{heartbeat: filepath.Join(dir, "hb"), checkpoint: filepath.Join(dir, "ckpt")}
	for _, f := range []string{files.heartbeat, files.checkpoint} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Minute)
	os.Chtimes(files.heartbeat, past, past)
	os.Chtimes(files.checkpoint, past, past)
	for _, tc := range []struct {
		name  string
		touch string
		want  string // the frames, in order
	}{
		{"checkpoint", files.checkpoint, string(wire.FrameCheckpoint)},
		{"heartbeat", files.heartbeat, string(wire.FrameProgress)},
		{"neither", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "30")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			w, r := relayWorker(t, "")
			ctx, cancel := context.WithTimeout(t.Context(), pollEvery*5/2)
			defer cancel()
			if tc.touch != "" {
				go func() {
					time.Sleep(pollEvery / 2)
					now := time.Now()
					os.Chtimes(tc.touch, now, now)
				}()
			}
			w.watch(ctx, cmd.Process.Pid, files, 0)
			w.conn.Close()
			_, _, _, _, kinds := r.collect(t)
			if kinds != tc.want {
				t.Errorf("frames %q, want %q", kinds, tc.want)
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

// TestJoinWatch: a connection to the store's port is seen as a join, with
// the node's TCP table read at the look that found the new socket; while
// the worker's sockets do not change, the table is read once in
// tableEvery looks, not at every look.
func TestJoinWatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	j := newJoinWatch(os.Getpid(), port)
	reads := 0
	j.established = func(pid, port int) map[string]bool { reads++; return readEstablished(pid, port) }
	for range 3 * tableEvery {
		if j.joined() {
			t.Fatal("joined before any connection to the store")
		}
	}
	// The listener is this process's own socket: new at the first look,
	// so read then and at the two looks after; then once in tableEvery.
	if want := 3 + 3; reads > want {
		t.Errorf("the TCP table was read %d times in %d looks with no new socket, want at most %d", reads, 3*tableEvery, want)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !j.joined() {
		t.Errorf("a connection to port %d, made just before the look, was not seen as a join", port)
	}
}
