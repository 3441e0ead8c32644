package ncclras

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeServer is how a fake RAS server behaves.
type fakeServer struct {
	hello string // the answer to CLIENT PROTOCOL
	json  bool   // it knows SET FORMAT json
	// stall, when >= 0, is how many bytes of the report it sends before it
	// stops answering; -1 sends it all.
	stall int
}

// serve runs s on a loopback port for one connection and returns its
// address and the commands it receives.
func serve(t *testing.T, s fakeServer, text, jsonText string) (addr string, cmds <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
	})
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		context.AfterFunc(t.Context(), func() { conn.Close() })
		br := bufio.NewReader(conn)
		report := text
		answer := func(line string) { io.WriteString(conn, line+"\n") }
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			cmd := strings.TrimRight(line, "\r\n")
			got <- cmd
			// The commands and answers of rasClientEventLoop.
			switch {
			case strings.HasPrefix(cmd, "CLIENT PROTOCOL "):
				answer(s.hello)
			case strings.HasPrefix(cmd, "TIMEOUT "):
				answer("OK")
			case cmd == "SET FORMAT json" && s.json:
				report = jsonText
				answer("OK")
			case cmd == "STATUS" || cmd == "VERBOSE STATUS":
				b := []byte(report)
				if s.stall >= 0 {
					b = b[:s.stall]
				}
				// NCCL sends the report in pieces as it gathers the data
				// (rasClientEnqueueMsg), then closes the connection.
				for len(b) > 0 {
					n := min(len(b), 97)
					if _, err := conn.Write(b[:n]); err != nil {
						return
					}
					b = b[n:]
				}
				if s.stall >= 0 {
					<-done
				}
				return
			default:
				answer("ERROR: Unknown command " + cmd)
			}
		}
	}()
	return ln.Addr().String(), got
}

func TestQuery(t *testing.T) {
	text, jsonText := laggingReport(), jsonLagging()
	communicators := strings.Index(text, "\nCommunicators...") + len("\nCommunicators...")
	ok := fakeServer{hello: "SERVER PROTOCOL 2", stall: -1}
	cases := []struct {
		name        string
		server      fakeServer
		json        bool
		verbose     bool
		timeout     time.Duration // of ctx; 0 for none
		cancelAfter time.Duration // cancels ctx
		wantCmds    []string
		wantReport  string
		wantErr     error  // matched with errors.Is
		wantErrText string // in the error's text
	}{{
		name:       "status",
		server:     ok,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "STATUS"},
		wantReport: text,
	}, {
		name:       "verbose status",
		server:     ok,
		verbose:    true,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "VERBOSE STATUS"},
		wantReport: text,
	}, {
		name:       "json",
		server:     fakeServer{hello: "SERVER PROTOCOL 2", json: true, stall: -1},
		json:       true,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"},
		wantReport: jsonText,
	}, {
		name:       "json asked of a server before 2.28.7",
		server:     ok,
		json:       true,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"},
		wantReport: text,
	}, {
		name:       "a deadline too short for NCCL's own timeout",
		server:     ok,
		timeout:    5 * time.Second,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"},
		wantReport: text,
	}, {
		name:       "a deadline long enough",
		server:     ok,
		timeout:    time.Minute,
		wantCmds:   []string{"CLIENT PROTOCOL 2", "STATUS"},
		wantReport: text,
	}, {
		name:        "no report before the deadline",
		server:      fakeServer{hello: "SERVER PROTOCOL 2", stall: 0},
		timeout:     300 * time.Millisecond,
		wantCmds:    []string{"CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"},
		wantErr:     context.DeadlineExceeded,
		wantErrText: "nccl ras at 127.0.0.1:",
	}, {
		name:        "report cut short by the deadline",
		server:      fakeServer{hello: "SERVER PROTOCOL 2", stall: communicators},
		timeout:     300 * time.Millisecond,
		wantCmds:    []string{"CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"},
		wantReport:  text[:communicators],
		wantErr:     context.DeadlineExceeded,
		wantErrText: "read report",
	}, {
		name:        "cancelled",
		server:      fakeServer{hello: "SERVER PROTOCOL 2", stall: 0},
		cancelAfter: 100 * time.Millisecond,
		wantCmds:    []string{"CLIENT PROTOCOL 2", "STATUS"},
		wantErr:     context.Canceled,
	}, {
		name:        "not a RAS server",
		server:      fakeServer{hello: "SSH-2.0-OpenSSH_9.6", stall: -1},
		wantCmds:    []string{"CLIENT PROTOCOL 2"},
		wantErrText: `unexpected answer "SSH-2.0-OpenSSH_9.6" to CLIENT PROTOCOL 2`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr, cmds := serve(t, tc.server, text, jsonText)
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			if tc.cancelAfter > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(tc.cancelAfter, cancel)
			}
			var got string
			var err error
			if tc.json {
				got, err = QueryJSON(ctx, addr)
			} else {
				got, err = Query(ctx, addr, tc.verbose)
			}
			for i, want := range tc.wantCmds {
				select {
				case cmd := <-cmds:
					if cmd != want {
						t.Errorf("command %d = %q, want %q", i, cmd, want)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("command %d never came, want %q", i, want)
				}
			}
			select {
			case cmd := <-cmds:
				t.Errorf("unexpected command %q", cmd)
			default:
			}
			if got != tc.wantReport {
				t.Errorf("report =\n%s\nwant\n%s", got, tc.wantReport)
			}
			switch {
			case tc.wantErr == nil && tc.wantErrText == "":
				if err != nil {
					t.Fatalf("Query: %v", err)
				}
			case err == nil:
				t.Fatalf("Query succeeded, want an error")
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("error %v is not %v", err, tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantErrText):
				t.Errorf("error %q does not say %q", err, tc.wantErrText)
			}
		})
	}
}

func TestQueryNobodyListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Query(t.Context(), addr, false)
	if err == nil || !strings.HasPrefix(err.Error(), "nccl ras at "+addr+": ") {
		t.Errorf("Query of a closed port: %v, want an error naming %s", err, addr)
	}
}

func TestQueryDefaultAddr(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := Query(ctx, "", false)
	if err == nil {
		t.Skip("something answers at " + DefaultAddr)
	}
	if !strings.HasPrefix(err.Error(), "nccl ras at "+DefaultAddr+": ") {
		t.Errorf("error %q does not name %s", err, DefaultAddr)
	}
}
