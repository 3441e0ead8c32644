package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRootCause(t *testing.T) {
	tests := []struct {
		name string
		file string // under testdata; text is used when empty
		text string
		want rootCause
		ok   bool
	}{
		{name: "single failure", file: "torchrun_failure.txt",
			want: rootCause{Time: "2024-05-01_12:00:01", Host: "node1", Rank: 3, LocalRank: 1, ExitCode: 7, PID: 1235}, ok: true},
		{name: "same-second tie: the worker with its own code, not the peer that died of exit 1",
			file: "torchrun_failure_tie.txt", // real torchrun 1.13 output
			want: rootCause{Time: "2026-11-30_12:33:33", Host: "localhost", Rank: 1, LocalRank: 1, ExitCode: 7, PID: 22922}, ok: true},
		{name: "exit 1 root cause kept when the other failure is a second apart",
			text: "Failures:\n[1]:\n  time      : t1\n  rank      : 1 (local_rank: 1)\n  exitcode  : 7 (pid: 2)\n  traceback : x\n----\n" +
				"Root Cause (first observed failure):\n[0]:\n  time      : t0\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 1)\n  traceback : x\n====\n",
			want: rootCause{Time: "t0", Rank: 0, LocalRank: 0, ExitCode: 1, PID: 1}, ok: true},
		{name: "root cause after other failures with decoy traceback", file: "torchrun_failure_multi.txt",
			want: rootCause{Time: "2024-05-01_12:00:01", Host: "gpu-b07.cluster", Rank: 10, LocalRank: 2, ExitCode: -9, PID: 88118}, ok: true},
		{name: "no summary", file: "torchrun_rendezvous.txt", ok: false},
		{name: "empty", text: "", ok: false},
		{name: "title without block",
			text: "Root Cause (first observed failure):\nsomething else\n", ok: false},
		{name: "block without exit code",
			text: "Root Cause (first observed failure):\n[0]:\n  rank      : 3 (local_rank: 1)\n====\n", ok: false},
		{name: "cut off after the code counts",
			text: "Root Cause (first observed failure):\n[0]:\n  rank      : 2 (local_rank: 0)\n  exitcode  : 1 (pid: 5)",
			want: rootCause{Rank: 2, LocalRank: 0, ExitCode: 1, PID: 5}, ok: true},
		{name: "last of two summaries wins",
			text: "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 3 (pid: 9)\n" +
				"  traceback : x\n====\nRoot Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 4 (pid: 8)\n====\n",
			want: rootCause{Rank: 0, LocalRank: 0, ExitCode: 4, PID: 8}, ok: true},
		{name: "CRLF and worker-prefixed decoys ignored by the caller",
			text: "Root Cause (first observed failure):\r\n[0]:\r\n  host      : n\r\n  rank      : 5 (local_rank: 5)\r\n  exitcode  : 2 (pid: 1)\r\n====\r\n",
			want: rootCause{Host: "n", Rank: 5, LocalRank: 5, ExitCode: 2, PID: 1}, ok: true},
		{name: "garbage values",
			text: "Root Cause (first observed failure):\n[0]:\n  rank      : x (local_rank: y)\n  exitcode  : 99999999999999999999 (pid: z)\n====\n", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := []byte(tt.text)
			if tt.file != "" {
				var err error
				if text, err = os.ReadFile(filepath.Join("testdata", tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := parseRootCause(text)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (got %+v)", ok, tt.ok, got)
			}
			if ok && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRootCauseThroughWriter checks the parser sees torchrun's raw lines as
// they pass the prefixer, written in awkward pieces.
func TestRootCauseThroughWriter(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("testdata", "torchrun_failure.txt"))
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(nil)
	var out strings.Builder
	l := newNodeLog("node1", 0, false, false)
	w := newLineWriter(l, s, &out)
	for len(text) > 0 {
		n := min(7, len(text))
		w.Write(text[:n])
		text = text[n:]
	}
	w.close()
	s.close()
	got, ok := l.rootCause()
	want := rootCause{Time: "2024-05-01_12:00:01", Host: "node1", Rank: 3, LocalRank: 1, ExitCode: 7, PID: 1235}
	if !ok || got != want {
		t.Fatalf("rootCause = %+v, %v; want %+v", got, ok, want)
	}
	if !strings.Contains(out.String(), "[node1 1] SystemExit: 7\n") || !strings.Contains(out.String(), "[node1]   rank      : 3 (local_rank: 1)\n") {
		t.Errorf("unexpected output:\n%s", out.String())
	}
}

func FuzzParseRootCause(f *testing.F) {
	for _, name := range []string{"torchrun_failure.txt", "torchrun_failure_multi.txt", "torchrun_rendezvous.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("Root Cause\n[0]:\n rank: -1 (local_rank: -\n exitcode: +\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rc, ok := parseRootCause(b)
		if !ok && rc != (rootCause{}) {
			t.Fatalf("not found but got %+v", rc)
		}
	})
}
