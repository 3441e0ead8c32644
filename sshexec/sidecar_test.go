package sshexec

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// testSidecar echoes its settings, ticks every 10 ms while the job runs,
// and says "bye" when its context ends.
func testSidecar(ctx context.Context, settings json.RawMessage, send func([]byte)) {
	send(append([]byte("settings "), settings...))
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			send([]byte("bye"))
			return
		case <-t.C:
			send([]byte("tick"))
		}
	}
}

// TestAgentSidecar: the sidecar's frames reach the head as wire.FrameTelemetry
// between the job's own output, it is stopped when the job's main process
// exits (before the agent exits), and a job without settings gets none.
func TestAgentSidecar(t *testing.T) {
	tests := []struct {
		name     string
		settings json.RawMessage
		want     []string
		none     bool
	}{
		{name: "with settings", settings: json.RawMessage(`{"interval":1}`), want: []string{`T:settings {"interval":1}`, "T:tick", "T:bye", "O:out\n"}},
		{name: "without settings", none: true, want: []string{"O:out\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLocal(os.Args[0])
			l.agentEnv = append(os.Environ(), testAgentEnv+"=sidecar")
			var mu sync.Mutex
			var frames []string
			dec := wire.NewFrameDecoder(func(kind byte, p []byte) {
				mu.Lock()
				defer mu.Unlock()
				frames = append(frames, string(kind)+":"+string(p))
			})
			var stderr bytes.Buffer
			p, err := l.Start(context.Background(), wire.Job{Argv: []string{"/bin/sh", "-c", "echo out; sleep 0.3"},
				Relay: true, Sidecar: tt.settings}, dec, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			code, err := p.Wait()
			if code != 0 || err != nil {
				t.Fatalf("exit %d, %v; stderr %s", code, err, stderr.String())
			}
			if dec.Err() != nil {
				t.Fatal(dec.Err())
			}
			mu.Lock()
			got := strings.Join(frames, "|")
			mu.Unlock()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("frames %q lack %q", got, w)
				}
			}
			if tt.none && strings.Contains(got, "T:") {
				t.Errorf("a job without sidecar settings got sidecar frames: %q", got)
			}
			if !tt.none && !strings.HasSuffix(got, "T:bye") && !strings.Contains(got, "T:bye|") {
				t.Errorf("the sidecar was not stopped: %q", got)
			}
		})
	}
}
