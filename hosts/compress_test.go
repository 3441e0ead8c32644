package hosts

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestCompress(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		want  string
	}{
		{"none", nil, ""},
		{"one", []string{"node1"}, "node1"},
		{"a run and a single", []string{"node1", "node2", "node3", "node7"}, "node[1-3,7]"},
		{"zero padding kept", []string{"node01", "node02"}, "node[01-02]"},
		{"padding changes the run", []string{"n08", "n09", "n10", "n011"}, "n[08-10,011]"},
		{"a run across a power of ten", []string{"n9", "n10", "n11"}, "n[9-11]"},
		{"unpadded after padded", []string{"n01", "n2"}, "n[01,2]"},
		{"no numeric suffix", []string{"gpu-a", "gpu-b"}, "gpu-a,gpu-b"},
		{"digits inside are prefix", []string{"rack1-n01", "rack1-n02", "rack2-n01"}, "rack1-n[01-02],rack2-n01"},
		{"order of appearance kept", []string{"b1", "a1", "b2"}, "b1,a1,b2"},
		{"descending stays as given", []string{"n3", "n2", "n1"}, "n[3,2,1]"},
		{"duplicates kept", []string{"n1", "n1", "n2"}, "n[1,1-2]"},
		{"all digits as they are", []string{"1", "2"}, "1,2"},
		{"mixed", []string{"login", "n1", "n2", "n1a", "n3"}, "login,n[1-2],n1a,n3"},
		{"zero", []string{"n0", "n1", "n00"}, "n[0-1,00]"},
		{"number too large for Slurm", []string{"n18446744073709551615", "n18446744073709551616"}, "n18446744073709551615,n18446744073709551616"},
		{"largest number Slurm takes", []string{"n18446744073709551613", "n18446744073709551614"}, "n[18446744073709551613-18446744073709551614]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compress(tt.names)
			if got != tt.want {
				t.Errorf("Compress(%q) = %q, want %q", tt.names, got, tt.want)
			}
			back, err := ExpandSlurmHostlist(got)
			if err != nil || !slices.Equal(back, tt.names) {
				t.Errorf("ExpandSlurmHostlist(%q) = %q, %v; want %q", got, back, err, tt.names)
			}
		})
	}
}

// An item longer than Slurm's 1024 bytes is split, and a prefix so long
// that no range fits beside it leaves each name alone.
func TestCompressLongItems(t *testing.T) {
	var odd []string
	for i := 1; i < 2000; i += 2 {
		odd = append(odd, fmt.Sprintf("node%d", i))
	}
	long := strings.Repeat("p", maxHostlistItem-4)
	for _, tc := range []struct {
		name  string
		names []string
		items int // top-level items at least
	}{
		{"many singles", odd, 2},
		{"long prefix", []string{long + "1", long + "2", long + "3"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expr := Compress(tc.names)
			items := 1
			depth := 0
			for _, c := range expr {
				switch {
				case c == '[':
					depth++
				case c == ']':
					depth--
				case c == ',' && depth == 0:
					items++
				}
			}
			if items < tc.items {
				t.Errorf("%d items, want at least %d", items, tc.items)
			}
			back, err := ExpandSlurmHostlist(expr)
			if err != nil || !slices.Equal(back, tc.names) {
				t.Fatalf("round trip: %v; %d names back, want %d", err, len(back), len(tc.names))
			}
		})
	}
}

// A run longer than one Slurm range may span is split.
func TestCompressLongRun(t *testing.T) {
	names, err := ExpandSlurmHostlist(fmt.Sprintf("n[0-%d]", maxHostlist-1))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Compress(names), fmt.Sprintf("n[0-%d]", maxHostlist-1); got != want {
		t.Errorf("Compress = %q, want %q", got, want)
	}
	r := suffixRanges([]suffix{{0, "0"}, {maxHostlist, fmt.Sprint(maxHostlist)}})
	if len(r) != 2 {
		t.Errorf("0 and %d merged into %v", maxHostlist, r)
	}
}

// randomNames draws up to n distinct host names from a small alphabet of
// prefixes, numbers and paddings, so that runs, padding changes and
// prefixes that are prefixes of each other all occur.
func randomNames(r *rand.Rand, n int) []string {
	prefixes := []string{"n", "node", "node-", "gpu", "rack1-n", "a.b", "n1a", "x_"}
	var names []string
	for range r.IntN(n + 1) {
		p := prefixes[r.IntN(len(prefixes))]
		switch r.IntN(6) {
		case 0:
			names = append(names, p) // no numeric suffix
		case 1:
			names = append(names, fmt.Sprintf("%s%03d", p, r.IntN(40)))
		default:
			names = append(names, fmt.Sprintf("%s%d", p, r.IntN(40)))
		}
	}
	return names
}

// ExpandSlurmHostlist(Compress(x)) is x for sorted distinct lists, and for
// lists in any order with repeats too.
func TestCompressRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2)) // fixed: a failure can be replayed
	for i := range 2000 {
		names := randomNames(r, 30)
		for _, x := range [][]string{slices.Compact(slices.Sorted(slices.Values(names))), names} {
			expr := Compress(x)
			back, err := ExpandSlurmHostlist(expr)
			if err != nil || !slices.Equal(back, x) {
				t.Fatalf("case %d: Compress(%q) = %q, which expands to %q, %v", i, x, expr, back, err)
			}
		}
	}
}

func FuzzCompress(f *testing.F) {
	for _, s := range []string{"node1,node2,node3,node7", "node01,node02", "b1,a1,b2", "n9,n10,n010", "1,2,x", "n0,n00,n000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		var names []string
		for _, n := range strings.Split(list, ",") {
			if validExpanded(n) {
				names = append(names, n)
			}
		}
		for _, x := range [][]string{slices.Compact(slices.Sorted(slices.Values(names))), names} {
			expr := Compress(x)
			back, err := ExpandSlurmHostlist(expr)
			if err != nil || !slices.Equal(back, x) {
				t.Fatalf("Compress(%q) = %q, which expands to %q, %v", x, expr, back, err)
			}
		}
	})
}

// validExpanded reports whether name is one ExpandSlurmHostlist can
// return.
func validExpanded(name string) bool {
	if name == "" || name[0] == '-' || len(name) > maxHostlistItem {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !labelByte(name[i]) && name[i] != '.' {
			return false
		}
	}
	return true
}
