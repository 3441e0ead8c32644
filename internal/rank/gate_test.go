package rank

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/wire"
)

// TestAwaitGate: a gated supervisor starts its worker on RelayGo (a
// resize or a passed signal before it changes nothing), ends by the
// stop's signal when the agent stops the job or a stop signal reaches it
// first, and by SIGKILL when the agent is gone; other signals that came
// meanwhile are dropped (for the attempt before's workers, not this
// one's); nothing after RelayGo is read.
func TestAwaitGate(t *testing.T) {
	cases := []struct {
		name string
		send []byte
		sig  os.Signal // sent to the supervisor before the agent's words
		hang bool      // the agent hangs up after its words
		want syscall.Signal
	}{
		{name: "go", send: []byte{wire.RelayGo}},
		{name: "resize and passed signal first", send: append(append([]byte{wire.TellResize}, "80x24;"...), wire.RelaySignal, 10, wire.RelayGo)},
		{name: "stopped", send: []byte{wire.RelayStop, byte(syscall.SIGTERM)}, want: syscall.SIGTERM},
		{name: "stopped from outside", send: []byte{wire.RelayHad, byte(syscall.SIGINT)}, want: syscall.SIGINT},
		{name: "agent gone", hang: true, want: syscall.SIGKILL},
		{name: "stop signal", sig: syscall.SIGTERM, want: syscall.SIGTERM},
		{name: "other signal dropped", sig: syscall.SIGUSR1, send: []byte{wire.RelayGo}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agent, sup := net.Pipe()
			defer agent.Close()
			w := &worker{conn: sup}
			sigs := make(chan os.Signal, 4)
			if c.sig != nil {
				sigs <- c.sig
			}
			go func() {
				if c.sig != nil {
					time.Sleep(50 * time.Millisecond) // the signal first
				}
				agent.Write(c.send)
				if c.hang {
					agent.Close()
				} else {
					agent.Write([]byte{wire.TellDump}) // for listen, after the release
				}
			}()
			done := make(chan syscall.Signal, 1)
			go func() { done <- w.awaitGate(sigs) }()
			var got syscall.Signal
			select {
			case got = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("awaitGate never returned")
			}
			if got != c.want {
				t.Errorf("awaitGate = %v, want %v", got, c.want)
			}
			select {
			case s := <-sigs:
				t.Errorf("%v, which came while gated, was kept for the worker", s)
			default:
			}
			if c.want == 0 {
				sup.SetReadDeadline(time.Now().Add(time.Second))
				b := make([]byte, 1)
				if n, err := sup.Read(b); n != 1 || b[0] != wire.TellDump {
					t.Errorf("after the release the next byte was %q (%v), want the one after RelayGo", b[:n], err)
				}
			}
		})
	}
}
