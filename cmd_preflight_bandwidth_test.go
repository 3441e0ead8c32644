package main

import (
	"strings"
	"testing"
)

func TestPreflightArgsBandwidth(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		rest string
	}{
		{[]string{"--bandwidth", "node", "--hosts", "a"}, "node", "--hosts a"},
		{[]string{"--json", "--bandwidth=all"}, "all", ""},
		{[]string{"--", "--bandwidth", "node"}, "", "-- --bandwidth node"},
	} {
		_, _, bw, rest, err := preflightArgs(tc.args)
		if err != nil || bw != tc.want || strings.Join(rest, " ") != tc.rest {
			t.Errorf("%q: bandwidth %q rest %q err %v; want %q, %q", tc.args, bw, rest, err, tc.want, tc.rest)
		}
	}
}
