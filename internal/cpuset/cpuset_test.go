package cpuset

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"\n", nil, false},
		{"0", []int{0}, false},
		{"0-3,8", []int{0, 1, 2, 3, 8}, false},
		{"0-3,8\n", []int{0, 1, 2, 3, 8}, false},
		{"8,0-2", []int{0, 1, 2, 8}, false},
		{"0-2,1-3", []int{0, 1, 2, 3}, false},
		{"5-5", []int{5}, false},
		{"3-1", nil, true},
		{"a", nil, true},
		{"1,", nil, true},
		{"-1", nil, true},
		{"1-", nil, true},
		{"0-99999999", nil, true},
		{"+1", nil, true},
		{"0-11:2", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Parse(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{8, 0, 1, 1, 2}, "0-2,8"},
		{[]int{0, 2, 4}, "0,2,4"},
		{[]int{0, 1, 96, 97}, "0-1,96-97"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			in := slices.Clone(tt.in)
			if got := Format(tt.in); got != tt.want {
				t.Errorf("Format(%v) = %q, want %q", tt.in, got, tt.want)
			}
			if !slices.Equal(in, tt.in) {
				t.Errorf("Format changed its argument to %v", tt.in)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		cpus string
		n    int
		want []string // nil: no split possible
	}{
		{"even", "0-15", 4, []string{"0-3", "4-7", "8-11", "12-15"}},
		{"remainder to lower parts", "0-9", 4, []string{"0-2", "3-5", "6-7", "8-9"}},
		{"siblings kept together", "0-47,96-143", 4, []string{"0-11,96-107", "12-23,108-119", "24-35,120-131", "36-47,132-143"}},
		{"uneven runs split as one", "0-3,8", 2, []string{"0-2", "3,8"}},
		{"scattered", "0,2,4,6,8,10", 3, []string{"0,2", "4,6", "8,10"}},
		{"one part", "0-7", 1, []string{"0-7"}},
		{"too few CPUs", "0-2", 4, nil},
		{"short runs split as one", "0-1,4-5", 4, []string{"0", "1", "4", "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpus, err := Parse(tt.cpus)
			if err != nil {
				t.Fatal(err)
			}
			parts := Split(cpus, tt.n)
			if tt.want == nil {
				if parts != nil {
					t.Fatalf("Split(%s, %d) = %v, want no split", tt.cpus, tt.n, parts)
				}
				return
			}
			var got []string
			var all []int
			for _, p := range parts {
				got = append(got, Format(p))
				all = append(all, p...)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Split(%s, %d) = %q, want %q", tt.cpus, tt.n, got, tt.want)
			}
			slices.Sort(all)
			if !slices.Equal(all, cpus) {
				t.Errorf("parts %v do not cover %v exactly once", got, cpus)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "0", "0-3,8", "8,0-2", "0-47,96-143", "3-1", "a,b", "1,,2", "0-65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := Parse(s)
		if err != nil {
			return
		}
		if !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) {
			t.Fatalf("Parse(%q) = %v, not sorted and distinct", s, cpus)
		}
		again, err := Parse(Format(cpus))
		if err != nil || !slices.Equal(again, cpus) {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
		for n := 1; n <= 9 && n <= len(cpus); n++ {
			var all []int
			for _, p := range Split(cpus, n) {
				if len(p) == 0 {
					t.Fatalf("Split(%q, %d) has an empty part", s, n)
				}
				all = append(all, p...)
			}
			slices.Sort(all)
			if !slices.Equal(all, cpus) {
				t.Fatalf("Split(%q, %d) does not partition the list", s, n)
			}
		}
	})
}

func TestSetAlgebra(t *testing.T) {
	tests := []struct {
		name                       string
		a, b                       []int
		union, intersect, subtract []int
	}{
		{"both empty", nil, nil, nil, []int{}, []int{}},
		{"a empty", nil, []int{1, 2}, []int{1, 2}, []int{}, []int{}},
		{"b empty", []int{1, 2}, nil, []int{1, 2}, []int{}, []int{1, 2}},
		{"disjoint", []int{0, 2}, []int{1, 3}, []int{0, 1, 2, 3}, []int{}, []int{0, 2}},
		{"overlap", []int{0, 1, 2, 5}, []int{1, 2, 3}, []int{0, 1, 2, 3, 5}, []int{1, 2}, []int{0, 5}},
		{"equal", []int{4, 7}, []int{4, 7}, []int{4, 7}, []int{4, 7}, []int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Union(tt.a, tt.b); !slices.Equal(got, tt.union) {
				t.Errorf("Union = %v, want %v", got, tt.union)
			}
			if got := Intersect(tt.a, tt.b); !slices.Equal(got, tt.intersect) {
				t.Errorf("Intersect = %v, want %v", got, tt.intersect)
			}
			if got := Subtract(tt.a, tt.b); !slices.Equal(got, tt.subtract) {
				t.Errorf("Subtract = %v, want %v", got, tt.subtract)
			}
		})
	}
}
