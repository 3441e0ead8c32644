package sshexec

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// uploadCache remembers, per Remote, where the agent binary went.
type uploadCache struct {
	mu    sync.Mutex // held for a whole upload: concurrent callers wait for it
	local string     // the local binary it is for
	path  string     // its path on the node
}

// Binary is a local gorun binary named by its content, as it is stored on
// the nodes. Hash it once (HashBinary) and upload it to every node.
type Binary struct {
	Path string // on this machine
	Name string // "gorun-<sha256[:16]>"
	Size int64
}

// HashBinary reads the binary at path once to name it by its content.
func HashBinary(path string) (Binary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Binary{}, err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return Binary{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return Binary{Path: path, Name: "gorun-" + hex.EncodeToString(h.Sum(nil))[:16], Size: size}, nil
}

// agentPath is the gorun to run on the node: --remote-gorun, or what
// EnsureAgent uploaded or a launcher named; "" if none.
func (r *Remote) agentPath() string {
	if r.cfg.RemoteGorun != "" {
		return r.cfg.RemoteGorun
	}
	r.upload.mu.Lock()
	defer r.upload.mu.Unlock()
	return r.upload.path
}

// unameArch maps `uname -m` to GOARCH.
var unameArch = map[string]string{
	"x86_64":  "amd64",
	"amd64":   "amd64",
	"aarch64": "arm64",
	"arm64":   "arm64",
	"ppc64le": "ppc64le",
	"s390x":   "s390x",
	"riscv64": "riscv64",
	"i686":    "386",
	"i386":    "386",
}

// EnsureAgent makes sure the node has localBinary (this gorun) and returns
// its path there; Start then runs it as the agent. The copy is
// content-addressed, $XDG_CACHE_HOME/gorun/gorun-<sha256[:16]> (default
// ~/.cache/gorun), so nodes keep one copy per build and a second run
// uploads nothing. The upload goes to a temporary name and is renamed into
// place, so a node never runs a half-written binary. With
// Config.RemoteGorun set, nothing is uploaded and that path is returned.
// The result is cached in r.
func (r *Remote) EnsureAgent(ctx context.Context, bin Binary) (string, error) {
	if r.cfg.RemoteGorun != "" {
		return r.cfg.RemoteGorun, nil
	}
	r.upload.mu.Lock()
	defer r.upload.mu.Unlock()
	if r.upload.path != "" && r.upload.local == bin.Name {
		return r.upload.path, nil
	}
	path, err := r.ensureAgent(ctx, bin)
	if err != nil {
		return "", fmt.Errorf("node %s: upload gorun: %w", r.node, err)
	}
	r.upload.local, r.upload.path = bin.Name, path
	return path, nil
}

func (r *Remote) ensureAgent(ctx context.Context, bin Binary) (string, error) {
	name, size := bin.Name, bin.Size

	// One round trip, shell builtins only when the copy is there (the
	// usual case): the cache dir, then "present", or else the node's
	// architecture. A file under the content-addressed name is always whole,
	// since uploads are renamed into place, and was checked for the
	// architecture by the gorun that uploaded it.
	probe := `d="${XDG_CACHE_HOME:-$HOME/.cache}/gorun" && printf '%s\n' "$d" && ` +
		`if [ -x "$d/$1" ]; then echo present; else uname -m; fi`
	out, err := r.output(ctx, []string{"sh", "-c", probe, "sh", name}, nil)
	if err != nil {
		return "", fmt.Errorf("probe node: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return "", fmt.Errorf("probe node: unexpected answer %q", out)
	}
	dir := lines[0]
	if !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("probe node: cache dir %q is not absolute (is $HOME set?)", dir)
	}
	final := dir + "/" + name
	if lines[1] == "present" {
		return final, nil
	}
	arch := strings.TrimSpace(lines[1])
	if goarch, ok := unameArch[arch]; !ok || goarch != runtime.GOARCH {
		return "", fmt.Errorf("node is %s (uname -m) but this gorun is built for %s: build gorun for the node's architecture and pass it with --remote-gorun", arch, runtime.GOARCH)
	}

	f, err := os.Open(bin.Path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", err
	}
	tmp := final + ".tmp." + hex.EncodeToString(nonce[:])
	// Copies from other builds not touched for a week are removed: a job
	// still running one keeps its open file, and a launch that wants one
	// again finds it missing and uploads it.
	script := `mkdir -p "$1" && cat > "$2" && chmod 755 "$2" && mv -f "$2" "$3" && wc -c < "$3" && ` +
		`{ find "$1" -maxdepth 1 -name 'gorun-*' ! -path "$3" -mtime +7 -delete 2>/dev/null || true; }`
	out, err = r.output(ctx, []string{"sh", "-c", script, "sh", dir, tmp, final}, f)
	if err != nil {
		// Best effort: leave no partial file behind.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = r.output(cctx, []string{"rm", "-f", tmp}, nil)
		cancel()
		return "", fmt.Errorf("copy to %s: %w", final, err)
	}
	if got, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err != nil || got != size {
		return "", fmt.Errorf("copy to %s: node has %q bytes, want %d", final, strings.TrimSpace(string(out)), size)
	}
	return final, nil
}
