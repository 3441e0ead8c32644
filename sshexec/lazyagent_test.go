package sshexec

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestClusterLazyAgent: with Config.Agent set and the node lacking the
// copy, the first AgentOutput or Start uploads it and runs it; a launcher
// that finds it runs it at once and names it.
func TestClusterLazyAgent(t *testing.T) {
	c := testCluster(t)
	ctx := context.Background()
	// A stand-in agent with fresh content, so no node has it yet; like the
	// real one, it reads the job line first.
	nonce := make([]byte, 8)
	rand.Read(nonce)
	script := filepath.Join(t.TempDir(), "fake-gorun")
	os.WriteFile(script, []byte("#!/bin/sh\n# "+hex.EncodeToString(nonce)+"\nread -r job\necho \"ran $*\"\n"), 0o755)
	bin, err := HashBinary(script)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.config()
	cfg.Agent = bin

	// A copy from an old build, untouched for ten days, is cleared by the
	// upload (the nodes share this filesystem and its home directory).
	home, _ := os.UserHomeDir()
	stale := filepath.Join(home, ".cache/gorun", "gorun-"+hex.EncodeToString(nonce)+"-stale")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	if err := os.WriteFile(stale, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-10 * 24 * time.Hour)
	os.Chtimes(stale, old, old)
	t.Cleanup(func() { os.Remove(stale) })

	r := dialT(t, c.nodes[0], cfg)
	out, err := r.AgentOutput(ctx, "_collect", "it's")
	if err != nil || strings.TrimSpace(string(out)) != "ran _collect it's" {
		t.Fatalf("AgentOutput on a node without the copy: %q, %v", out, err)
	}
	path := r.agentPath()
	if !strings.HasSuffix(path, "/"+bin.Name) {
		t.Fatalf("agentPath = %q after the upload", path)
	}
	t.Cleanup(func() { os.Remove(path) }) // the nodes share this filesystem
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("a copy untouched for ten days survived the upload")
	}

	// A fresh connection: the launcher finds the copy and starts it at once.
	r2 := dialT(t, c.nodes[1], cfg)
	var stdout, stderr bytes.Buffer
	p, err := r2.Start(ctx, wire.Job{Argv: []string{"unused"}}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait = %d, %v; stderr %q", code, err, stderr.String())
	}
	if got := stdout.String(); got != "ran _agent\n" {
		t.Fatalf("job output %q: the launcher's line must not reach it", got)
	}
	if r2.agentPath() != path {
		t.Fatalf("the launcher named %q, want %q", r2.agentPath(), path)
	}

	// Removed behind gorun's back: Start uploads again.
	os.Remove(path)
	r3 := dialT(t, c.nodes[2%len(c.nodes)], cfg)
	p, err = r3.Start(ctx, wire.Job{Argv: []string{"unused"}}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait after a re-upload = %d, %v", code, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("not uploaded again: %v", err)
	}
}
