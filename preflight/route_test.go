package preflight

import (
	"context"
	"net"
	"strconv"
	"testing"
)

// TestProbeRoute opens real TCP connections: to a listening port (the
// route is confirmed) and to a closed one (the check fails).
func TestProbeRoute(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := ln.Addr().(*net.TCPAddr).Port
	closedLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := closedLn.Addr().(*net.TCPAddr).Port
	closedLn.Close()
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tc := range []struct {
		port int
		want Severity
	}{{open, SeverityOK}, {closed, SeverityFail}} {
		t.Run(strconv.Itoa(tc.port), func(t *testing.T) {
			rt := Route{Target: "127.0.0.1", Interface: "lo", Source: "127.0.0.1"}
			probeRoute(context.Background(), &rt, tc.port)
			got := checkRoute(Facts{Route: &rt})
			if len(got) != 1 || got[0].Severity != tc.want {
				t.Fatalf("port %d: %+v, want %s", tc.port, got, tc.want)
			}
		})
	}
}
