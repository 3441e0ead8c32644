package hosts

import (
	"fmt"
	"slices"
	"testing"
)

// TestAlike: the first Show hosts of a notice are said at once, the rest
// named in one line per notice at Flush, in the order the notices came,
// with the first host's text; a Flush says each gathered host once.
func TestAlike(t *testing.T) {
	a := Alike{Show: 2}
	var said []string
	for i := range 5 {
		h := fmt.Sprintf("n%d", i)
		if a.Add(h, "refused \x00", "refused "+h) {
			said = append(said, h)
		}
		if i < 3 && a.Add(h, "cold", "cold") {
			said = append(said, h+" cold")
		}
	}
	if want := []string{"n0", "n0 cold", "n1", "n1 cold"}; !slices.Equal(said, want) {
		t.Errorf("said at once %q, want %q", said, want)
	}
	want := []string{"3 more nodes alike (n[2-4]): refused n0", "1 more node alike (n2): cold"}
	if got := a.Flush(); !slices.Equal(got, want) {
		t.Errorf("Flush = %q, want %q", got, want)
	}
	if got := a.Flush(); got != nil {
		t.Errorf("a second Flush = %q, want nothing", got)
	}
}
