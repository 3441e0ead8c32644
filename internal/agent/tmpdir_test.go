package agent

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestSweepPrivateDirs: of the directories named like an agent's or a
// standby's, the sweep removes only those old, unlocked and not answering.
func TestSweepPrivateDirs(t *testing.T) {
	tmp := t.TempDir()
	old := time.Now().Add(-2 * staleAfter)
	mk := func(name string, mtime time.Time) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "sock"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return d
	}
	stale := mk(wire.RelayDirPrefix+"stale", old)
	staleWarm := mk(warmDirPrefix+"stale", old)
	young := mk(wire.RelayDirPrefix+"young", time.Now())
	other := mk("other-prefix", old)
	held := mk(wire.RelayDirPrefix+"held", old)
	// held is locked as privateDir locks its own directory.
	lock, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := flockNB(lock); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(held, old, old); err != nil {
		t.Fatal(err)
	}

	// An agent without a lock whose socket answers (a gorun from before
	// the locks) is alive.
	listening := mk(wire.RelayDirPrefix+"listening", old)
	os.Remove(filepath.Join(listening, "sock"))
	ln, err := net.Listen("unix", filepath.Join(listening, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chtimes(listening, old, old); err != nil {
		t.Fatal(err)
	}

	if n := sweepPrivateDirs(tmp, privateDirPrefixes(), time.Now()); n != 2 {
		t.Errorf("swept %d directories, want 2 (the stale agent's and standby's)", n)
	}
	for d, want := range map[string]bool{stale: false, staleWarm: false, young: true, other: true, held: true, listening: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: there %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}

// TestPrivateDirLocked: a directory privateDir made is not swept while
// its lock is open, and is once it is closed.
func TestPrivateDirLocked(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir, lock, err := privateDir(wire.RelayDirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(2 * staleAfter) // as if it had been there for minutes
	if n := sweepPrivateDirs(os.TempDir(), privateDirPrefixes(), future); n != 0 {
		t.Fatalf("swept %d directories while their lock is held", n)
	}
	lock.Close()
	if n := sweepPrivateDirs(os.TempDir(), privateDirPrefixes(), future); n != 1 {
		t.Fatalf("swept %d directories once the lock was let go, want 1", n)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s still there", dir)
	}
}
