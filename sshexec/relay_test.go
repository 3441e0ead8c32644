package sshexec

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// relayClient is the test binary as a descendant that reports on the relay
// socket: it sends a frame, forges an agent frame (which must be dropped),
// then answers every byte it is told with a frame carrying it.
func relayClient() int {
	c, err := net.Dial("unix", os.Getenv(wire.RelaySocketVar))
	if err != nil {
		return 3
	}
	defer c.Close()
	c.Write(wire.AppendFrame(wire.AppendFrame(nil, 'x', []byte("hello")), wire.FrameStdout, []byte("forged\n")))
	os.Stdout.WriteString("main out\n")
	os.Stderr.WriteString("main err\n")
	br := bufio.NewReader(c)
	b, err := br.ReadByte()
	if err != nil {
		return 4
	}
	c.Write(wire.AppendFrame(nil, 't', []byte{b}))
	return 0
}

// startRelayClient starts argv as a relayed job whose processes include
// the relay client (relayClient) and waits for its first frame; frames
// lists every frame the head got so far, "kind:payload" joined by "|".
func startRelayClient(t *testing.T, argv []string, grace time.Duration) (p Process, frames func() string, stderr *bytes.Buffer) {
	t.Helper()
	l := NewLocal(os.Args[0])
	l.agentEnv = append(os.Environ(), testAgentEnv+"=1")
	var mu sync.Mutex
	var got []string
	hello := make(chan struct{})
	dec := wire.NewFrameDecoder(func(kind byte, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(kind)+":"+string(p))
		if kind == 'x' {
			close(hello)
		}
	})
	stderr = &bytes.Buffer{}
	p, err := l.Start(context.Background(), wire.Job{Argv: argv, Relay: true, Grace: grace,
		Env: map[string]string{testAgentEnv: "0", "GORUN_TEST_RELAY_CLIENT": "1"}}, dec, stderr)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hello:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's frame never arrived")
	}
	return p, func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(got, "|")
	}, stderr
}

// TestAgentRelay: a relayed job's output and its descendants' frames reach
// the head framed, a forged agent frame is dropped, and Tell reaches the
// descendant.
func TestAgentRelay(t *testing.T) {
	p, frames, stderr := startRelayClient(t, []string{os.Args[0]}, 0)
	p.Tell('!')
	code, err := p.Wait()
	if code != 0 || err != nil {
		t.Fatalf("exit %d, %v; stderr %s", code, err, stderr.String())
	}
	got := frames()
	for _, want := range []string{"x:hello", "O:main out\n", "E:main err\n", "t:!"} {
		if !strings.Contains(got, want) {
			t.Errorf("frames %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "forged") {
		t.Errorf("a client forged the job's own output: %q", got)
	}
}

// TestRelayStopOrInterrupt: a stop the head asks for reaches the workers'
// supervisors as wire.RelayStop, one the head got from outside (Interrupt) as
// wire.RelayHad, so a supervisor whose worker had its own copy of a signal sent
// to every process of the job does not give it a second.
func TestRelayStopOrInterrupt(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(Process)
		want string
	}{
		{"stop", func(p Process) { p.Stop(false) }, "t:T"},
		{"interrupt", func(p Process) { p.Interrupt(syscall.SIGTERM, 5*time.Second) }, "t:H"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The client is the main process's child: a stop freezes the main one.
			p, frames, stderr := startRelayClient(t, []string{"sh", "-c", `"$0" & wait`, os.Args[0]}, 5*time.Second)
			tc.stop(p)
			if _, err := p.Wait(); err != nil {
				t.Fatalf("%v; stderr %s", err, stderr.String())
			}
			if got := frames(); !strings.Contains(got, tc.want) {
				t.Errorf("frames %q lack %q: the client heard the wrong stop", got, tc.want)
			}
		})
	}
}
