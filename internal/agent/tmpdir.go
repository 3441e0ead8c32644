package agent

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// staleAfter: a private directory younger than this is never swept, so
// that one made a moment ago, not yet locked by its owner, is left alone.
const staleAfter = time.Minute

// privateDirPrefixes are the private directories an agent makes: its
// relay's, and each standby's.
func privateDirPrefixes() []string { return []string{wire.RelayDirPrefix, warmDirPrefix} }

// privateDir makes a fresh directory under the system's temporary folder,
// named prefix and a random tail, readable by its owner only, and holds a
// lock on it (flock) for as long as the returned file is open: close it
// after removing the directory. The lock is what tells sweepPrivateDirs
// that its owner lives.
func privateDir(prefix string) (string, *os.File, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	lock, err := os.Open(dir)
	if err == nil {
		if err = flockNB(lock); err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, lock, nil
}

// sweepPrivateDirs removes each directory in tmp named with one of
// prefixes that this user owns, that is older than staleAfter and that no
// process holds locked: those left by an agent or a standby killed
// outright (SIGKILL, the OOM killer), so that a job leaves no file behind
// for long. Every agent sweeps once as it starts (startRelay). What it
// cannot read or remove it leaves: sweeping is a courtesy, never a reason
// to fail a launch.
func sweepPrivateDirs(tmp string, prefixes []string, now time.Time) int {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return 0
	}
	swept := 0
	for _, e := range entries {
		if !e.IsDir() || !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(e.Name(), p) }) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		info, err := os.Lstat(dir)
		if err != nil || !info.IsDir() || now.Sub(info.ModTime()) < staleAfter {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if removeUnlocked(dir) {
			swept++
		}
	}
	return swept
}

// removeUnlocked removes dir if it can take dir's lock, that is if its
// owner is gone; the lock is held while removing, so that no owner comes
// back to it in between.
func removeUnlocked(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	if flockNB(f) != nil {
		return false // held: its agent or standby runs
	}
	// An agent of a gorun from before these locks holds none: one whose
	// socket still answers is alive.
	if c, err := net.DialTimeout("unix", filepath.Join(dir, "sock"), time.Second); err == nil {
		c.Close()
		return false
	}
	return os.RemoveAll(dir) == nil
}

// flockNB takes f's exclusive lock, or fails at once if it is held.
func flockNB(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
