package rank

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// fakeRAS answers NCCL's RAS protocol on a loopback port, for as many
// connections as come, with report(n) for the nth STATUS (from 0).
func fakeRAS(t *testing.T, hello string, report func(n int, json bool) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				asJSON := false
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					switch cmd := strings.TrimSpace(line); {
					case strings.HasPrefix(cmd, "CLIENT PROTOCOL "):
						io.WriteString(conn, hello+"\n")
					case strings.HasPrefix(cmd, "TIMEOUT "):
						io.WriteString(conn, "OK\n")
					case cmd == "SET FORMAT json":
						asJSON = true
						io.WriteString(conn, "OK\n")
					case strings.HasSuffix(cmd, "STATUS"):
						io.WriteString(conn, report(int(n.Add(1)-1), asJSON))
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// closedPort is a loopback address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// relayWorker is a worker of local rank 1 whose frames go to a relay
// server, as the RAS reporter's would.
func relayWorker(t *testing.T, rasAddr string) (*worker, *relayServer) {
	t.Helper()
	r := newRelayServer(t)
	c, err := net.Dial("unix", r.path)
	if err != nil {
		t.Fatal(err)
	}
	return &worker{localRank: 1, rank: 3, stderr: io.Discard, conn: c, connOK: true,
		stopped: make(chan struct{}), ras: true, rasAddr: rasAddr}, r
}

// textReport is a RAS text report of a job of 2 ranks on one node in
// which rank 1 is behind when lag is set.
func textReport(lag bool) string {
	s := "NCCL version 2.27.3+cuda12.9\nCUDA runtime version 12090, driver version 12090\n\n" +
		"\nCommunicators... (0.001s)\n=============\n\n" +
		"Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n" +
		"    #  in group  per comm  per node  per comm  in group\n"
	if !lag {
		return s + "    0         1         1         2         2         2   RUNNING      OK\n\nErrors\n======\n\nWarnings\n========\n\n"
	}
	return s + "    0         1         1         2         2         2   RUNNING  MISMATCH\n\nErrors\n======\n\nWarnings\n========\n\n" +
		"#0-0 (0000000000000001) MISMATCH\n" +
		"  Communicator ranks have different AllReduce operation counts\n" +
		"  1 ranks have launched up to operation 9\n" +
		"  Rank 0 -- GPU 0 managed by process 10 on node 10.0.0.1\n" +
		"  Rank 1 has launched up to operation 8 -- GPU 1 managed by process 11 on node 10.0.0.1\n\n"
}

// jsonReport is NCCL's JSON dump of a job of 2 ranks that each launched n
// AllReduces.
func jsonReport(n int) string {
	rank := func(r int) string {
		return fmt.Sprintf(`{"rank": %d, "host": "10.0.0.1", "pid": %d, "cuda_dev": %d, "nvml_dev": %d, "status": {"init_state": 0, "async_error": 0}, "collective_counts": {"AllReduce": %d}}`, r, 10+r, r, r, n)
	}
	return `{"nccl_version": "2.28.9", "communicators": [{"hash": "0x1", "size": 2, "ranks": [` + rank(0) + `, ` + rank(1) + `], "missing_ranks": []}]}` + "\n"
}

// TestReportRAS: asked for NCCL's report, the reporter relays it line by
// line, then says which ranks lag, then that it is done; a job without
// NCCL (nobody listens) says only that it is done.
func TestReportRAS(t *testing.T) {
	tests := []struct {
		name    string
		addr    func(t *testing.T) string
		want    []string // in the relayed stderr, in order
		wantErr string   // the whole relayed stderr, when want is nil
	}{
		{"lagging rank", func(t *testing.T) string {
			return fakeRAS(t, "SERVER PROTOCOL 2", func(int, bool) string { return textReport(true) })
		}, []string{"nccl ras: NCCL version 2.27.3", "nccl ras: #0-0 (0000000000000001) MISMATCH\n",
			"nccl ras: ranks behind the others (did not join a collective, or no answer): 1\n"}, ""},
		{"no lag", func(t *testing.T) string {
			return fakeRAS(t, "SERVER PROTOCOL 2", func(int, bool) string { return textReport(false) })
		}, []string{"nccl ras: Communicators... (0.001s)\n", "nccl ras: no rank lags in its collective count\n"}, ""},
		{"not a RAS server", func(t *testing.T) string {
			return fakeRAS(t, "SSH-2.0-OpenSSH_9.6", func(int, bool) string { return "" })
		}, []string{"nccl ras: no report (nccl ras at 127.0.0.1:", `unexpected answer "SSH-2.0-OpenSSH_9.6"`}, ""},
		{"no NCCL", closedPort, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, r := relayWorker(t, tt.addr(t))
			w.reportRAS(t.Context())
			w.conn.Close()
			_, out, errOut, _, kinds := r.collect(t)
			if out != "" {
				t.Errorf("stdout relayed %q, want nothing", out)
			}
			if !strings.HasSuffix(kinds, string(wire.FrameRASDone)) {
				t.Errorf("frames %q, want the RAS-done frame last", kinds)
			}
			if wantLag := map[bool]string{true: "[1]"}[tt.name == "lagging rank"]; r.rasDone != wantLag {
				t.Errorf("the RAS-done frame says %q lag, want %q", r.rasDone, wantLag)
			}
			if tt.want == nil && errOut != tt.wantErr {
				t.Errorf("stderr relayed %q, want %q", errOut, tt.wantErr)
			}
			rest := errOut
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stderr relayed %q: no %q (in order)", errOut, w)
				}
				rest = rest[i+len(w):]
			}
			for _, l := range strings.SplitAfter(errOut, "\n") {
				if l != "" && !strings.HasPrefix(l, "nccl ras: ") {
					t.Errorf("line %q is not marked", l)
				}
			}
		})
	}
}

// TestWatchRAS: the reporter counts a growing total of collectives as
// progress; a total that stands still, a text report (no exact counts) and
// a job without NCCL are not.
func TestWatchRAS(t *testing.T) {
	tests := []struct {
		name     string
		addr     func(t *testing.T) string
		progress bool
	}{
		{"growing", func(t *testing.T) string {
			return fakeRAS(t, "SERVER PROTOCOL 2", func(n int, _ bool) string { return jsonReport(100 + n) })
		}, true},
		{"standing still", func(t *testing.T) string {
			return fakeRAS(t, "SERVER PROTOCOL 2", func(int, bool) string { return jsonReport(100) })
		}, false},
		{"text only (NCCL before 2.28.7)", func(t *testing.T) string {
			return fakeRAS(t, "SERVER PROTOCOL 2", func(int, bool) string { return textReport(false) })
		}, false},
		{"no NCCL", closedPort, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, r := relayWorker(t, tt.addr(t))
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			w.watchRAS(ctx, 20*time.Millisecond)
			w.conn.Close()
			_, _, _, _, kinds := r.collect(t)
			if got := strings.ContainsRune(kinds, rune(wire.FrameProgress)); got != tt.progress {
				t.Errorf("frames %q: progress %v, want %v", kinds, got, tt.progress)
			}
		})
	}
}

func TestRASReporter(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"LOCAL_RANK": "0", "GROUP_RANK": "0"}, true},
		{map[string]string{"LOCAL_RANK": "1", "GROUP_RANK": "0"}, false},
		{map[string]string{"LOCAL_RANK": "0", "GROUP_RANK": "1"}, false},
		{map[string]string{"LOCAL_RANK": "0", "GROUP_RANK": "0", "NCCL_RAS_ENABLE": "0"}, false},
	}
	for _, tt := range tests {
		if got := rasReporter(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("rasReporter(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}
