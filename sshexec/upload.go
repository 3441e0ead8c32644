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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/buildinfo"
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
	// Arch (GOARCH) and Glibc (the newest GLIBC_ symbol version it
	// needs; nil: none) are what a node must have to run it.
	Arch  string
	Glibc []int
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
	b := Binary{Path: path, Name: "gorun-" + hex.EncodeToString(h.Sum(nil))[:16], Size: size}
	if info, err := buildinfo.ReadBinary(path); err == nil {
		b.Arch, b.Glibc = info.Arch, info.Glibc
	}
	return b, nil
}

// UnfitError says that no gorun the head has fits a node: none is built
// for its architecture, or the one that is needs a newer glibc. Nothing
// was uploaded or started there.
type UnfitError struct {
	Node  string
	Arch  string // uname -m
	Glibc string // the node's ("2.17"); "" when it has none gorun could read (musl)
	Why   string
}

func (e *UnfitError) Error() string {
	glibc := "glibc " + e.Glibc
	if e.Glibc == "" {
		glibc = "no glibc gorun could read"
	}
	return fmt.Sprintf("node %s is %s with %s: %s; put a gorun built for it beside this one (gorun-linux-ARCH) or in ~/.cache/gorun/, or install one there and pass --remote-gorun PATH",
		e.Node, e.Arch, glibc, e.Why)
}

// choose is the build of bins for a node of arch (uname -m) and glibc
// (getconf's line; "" unknown), or why none fits.
func choose(bins []Binary, arch, glibc string) (Binary, string) {
	goarch, ok := unameArch[arch]
	if !ok {
		return Binary{}, "gorun has no build for that architecture"
	}
	var have []string
	for _, b := range bins {
		if b.Arch == "" {
			b.Arch = runtime.GOARCH // not read: the head's own, as built
		}
		if b.Arch != goarch {
			have = append(have, b.Arch)
			continue
		}
		if b.Glibc == nil {
			return b, ""
		}
		if v, ok := buildinfo.ParseGlibc(glibc); !ok || slices.Compare(v, b.Glibc) < 0 {
			return Binary{}, fmt.Sprintf("the gorun here for %s needs glibc %s or later", goarch, buildinfo.VersionString(b.Glibc))
		}
		return b, ""
	}
	return Binary{}, fmt.Sprintf("the gorun here is built for %s only", strings.Join(have, ", "))
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
	// One round trip: the cache dir; the node's architecture and glibc;
	// then the name of each build that is there already. A file under the
	// content-addressed name is always whole, since uploads are renamed
	// into place, and was chosen for the node by the gorun that uploaded
	// it.
	bins := append([]Binary{bin}, r.cfg.Others...)
	probe := `d="${XDG_CACHE_HOME:-$HOME/.cache}/gorun" && printf '%s\n' "$d" && uname -m && ` +
		`{ getconf GNU_LIBC_VERSION 2>/dev/null || echo; } && for n; do [ -x "$d/$n" ] && echo "$n"; done; true`
	argv := []string{"sh", "-c", probe, "sh"}
	for _, b := range bins {
		argv = append(argv, b.Name)
	}
	out, err := r.output(ctx, argv, nil)
	if err != nil {
		return "", fmt.Errorf("probe node: %w", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) < 3 {
		return "", fmt.Errorf("probe node: unexpected answer %q", out)
	}
	dir, arch, glibc, present := lines[0], strings.TrimSpace(lines[1]), strings.TrimSpace(lines[2]), lines[3:]
	if !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("probe node: cache dir %q is not absolute (is $HOME set?)", dir)
	}
	chosen, why := choose(bins, arch, glibc)
	if why != "" {
		v, _ := buildinfo.ParseGlibc(glibc)
		return "", &UnfitError{Node: r.node, Arch: arch, Glibc: buildinfo.VersionString(v), Why: why}
	}
	bin = chosen
	name, size := bin.Name, bin.Size
	final := dir + "/" + name
	if slices.Contains(present, name) {
		return final, nil
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
