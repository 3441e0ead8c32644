package lazyre

import (
	"sync"
	"testing"
)

// TestNew: the pattern compiles once, on first use, and every caller, at
// once too, gets the same compiled expression.
func TestNew(t *testing.T) {
	re := New(`^a(b+)$`)
	var wg sync.WaitGroup
	got := make([]any, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = re()
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("caller %d got another compiled expression", i)
		}
	}
	if m := re().FindStringSubmatch("abbb"); len(m) != 2 || m[1] != "bbb" {
		t.Errorf("match = %q", m)
	}
}

// TestNewBadPattern: a bad pattern panics on first use, as
// regexp.MustCompile would at start-up.
func TestNewBadPattern(t *testing.T) {
	re := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("no panic for a bad pattern")
		}
	}()
	re()
}
