package wire

import "testing"

func TestStdStreams(t *testing.T) {
	for _, tc := range []struct {
		spec string
		rank int
		want int
	}{
		{"3", 0, 3}, {"3", 5, 3}, {"1", 1, 1}, {"0", 0, 0}, {"", 0, 0},
		{"0:3,1:2", 0, 3}, {"0:3,1:2", 1, 2}, {"0:3,1:2", 2, 0}, {" 0:1 , 1:2 ", 1, 2},
	} {
		if got := StdStreams(tc.spec, tc.rank); got != tc.want {
			t.Errorf("StdStreams(%q, %d) = %d, want %d", tc.spec, tc.rank, got, tc.want)
		}
	}
}
