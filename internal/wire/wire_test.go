package wire

import (
	"encoding/json"
	"testing"
)

func TestRankRoundTrip(t *testing.T) {
	for _, lr := range []int{0, 1, 7, 1 << 20} {
		p := append(AppendRank(nil, lr), "hello\n"...)
		got, rest, err := SplitRank(p)
		if err != nil || got != lr || string(rest) != "hello\n" {
			t.Errorf("SplitRank(AppendRank(%d)) = %d, %q, %v", lr, got, rest, err)
		}
	}
	if _, _, err := SplitRank([]byte{0, 0, 1}); err == nil {
		t.Error("SplitRank of 3 bytes: no error")
	}
}

func TestWorkerExit(t *testing.T) {
	tests := []struct {
		name   string
		ex     WorkerExit
		failed bool
		code   int
	}{
		{"exit 0", WorkerExit{}, false, 0},
		{"exit 3", WorkerExit{Code: 3}, true, 3},
		{"SIGKILL", WorkerExit{Code: -1, Signal: 9}, true, 137},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ex.Failed(); got != tt.failed {
				t.Errorf("Failed() = %v, want %v", got, tt.failed)
			}
			if got := tt.ex.ShellCode(); got != tt.code {
				t.Errorf("ShellCode() = %d, want %d", got, tt.code)
			}
		})
	}
}

// TestJSON: the payloads keep their field names, which both sides of a
// mixed-version job read.
func TestJSON(t *testing.T) {
	st := WorkerStarted{Rank: 3, LocalRank: 1, WorldSize: 4, PID: 99, Time: 5, RASReporter: true}
	if got, want := string(JSON(st)), `{"rank":3,"local_rank":1,"world_size":4,"pid":99,"time_ns":5,"ras_reporter":true}`; got != want {
		t.Errorf("started = %s, want %s", got, want)
	}
	ex := WorkerExit{Rank: 3, LocalRank: 1, Code: -1, Signal: 6, Stopped: true, Time: 7}
	var back WorkerExit
	if err := json.Unmarshal(JSON(ex), &back); err != nil || back != ex {
		t.Errorf("exit round trip = %+v, %v; want %+v", back, err, ex)
	}
}

func TestTTYRoundTrip(t *testing.T) {
	for _, tt := range []TTY{{120, 40, true, true}, {80, 24, true, false}, {80, 24, false, true}} {
		if got := ParseTTY(FormatTTY(tt)); got != tt {
			t.Errorf("ParseTTY(FormatTTY(%+v)) = %+v", tt, got)
		}
	}
	if s := FormatTTY(TTY{Cols: 80, Rows: 24}); s != "" {
		t.Errorf("no stream on a terminal: %q, want nothing", s)
	}
	for _, s := range []string{"", "80x24", "junk", "80:out"} {
		if got := ParseTTY(s); got.Out || got.Err {
			t.Errorf("ParseTTY(%q) = %+v, want no terminal", s, got)
		}
	}
}
