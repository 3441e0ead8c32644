package agent

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr bool
	}{
		{
			name: "plain",
			in:   "1234 (sleep) S 1200 1234 1100 0 -1 4194304 90 0 0 0 0 0 0 0 20 0 1 0 4711 0 0\n",
			want: procStat{Pid: 1234, State: 'S', Ppid: 1200, Pgrp: 1234, Sid: 1100},
		},
		{
			name: "name with spaces and parens",
			in:   "77 (a) b (c)) Z 1 77 77 0",
			want: procStat{Pid: 77, State: 'Z', Ppid: 1, Pgrp: 77, Sid: 77},
		},
		{name: "empty name", in: "5 () R 4 5 5", want: procStat{Pid: 5, State: 'R', Ppid: 4, Pgrp: 5, Sid: 5}},
		{name: "empty", in: "", wantErr: true},
		{name: "no parens", in: "5 sleep S 1 2 3", wantErr: true},
		{name: "bad pid", in: "x (sleep) S 1 2 3", wantErr: true},
		{name: "zero pid", in: "0 (sleep) S 1 2 3", wantErr: true},
		{name: "truncated", in: "5 (sleep) S 1 2", wantErr: true},
		{name: "bad ppid", in: "5 (sleep) S one 2 3", wantErr: true},
		{name: "long state", in: "5 (sleep) SS 1 2 3", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1234 (sleep) S 1200 1234 1100 0 -1"))
	f.Add([]byte("77 (a) b (c)) Z 1 77 77 0"))
	f.Add([]byte("5 ((((( R 4 5 5"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseProcStat(b)
		if err == nil && st.Pid <= 0 {
			t.Errorf("accepted pid %d", st.Pid)
		}
	})
}

func TestDescendants(t *testing.T) {
	procs := []procStat{
		{Pid: 1, Ppid: 0},
		{Pid: 10, Ppid: 1},  // root
		{Pid: 11, Ppid: 10}, // child
		{Pid: 12, Ppid: 11}, // grandchild
		{Pid: 13, Ppid: 12}, // great-grandchild
		{Pid: 14, Ppid: 10}, // second child
		{Pid: 20, Ppid: 1},  // unrelated
		{Pid: 21, Ppid: 20}, // unrelated child
		{Pid: 30, Ppid: 31}, // cycle from pid reuse mid-scan
		{Pid: 31, Ppid: 30},
	}
	tests := []struct {
		root int
		want []int
	}{
		{root: 10, want: []int{11, 12, 13, 14}},
		{root: 12, want: []int{13}},
		{root: 13, want: nil},
		{root: 99, want: nil},
		{root: 30, want: []int{31}},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.root), func(t *testing.T) {
			var got []int
			for _, p := range descendants(procs, tc.root) {
				got = append(got, p.Pid)
			}
			sort.Ints(got)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("descendants(%d) = %v, want %v", tc.root, got, tc.want)
			}
		})
	}
}

// TestReadProcsSelf: the real /proc parses and includes this process with
// its real parent and group.
func TestReadProcsSelf(t *testing.T) {
	procs, err := readProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Pid == os.Getpid() {
			if p.Ppid != os.Getppid() || p.Pgrp != syscall.Getpgrp() {
				t.Errorf("self = %+v, want ppid %d pgrp %d", p, os.Getppid(), syscall.Getpgrp())
			}
			return
		}
	}
	t.Errorf("pid %d not among %d processes", os.Getpid(), len(procs))
}

// TestSignalTree kills the descendants of a shell, including one in a
// session of its own that ignores SIGTERM, and leaves the shell itself.
func TestSignalTree(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("/bin/sh", "-c", `sleep 100 & setsid sh -c "trap '' TERM; sleep 100 & wait" & echo ready; wait; exec sleep 100`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	root := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-root, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	// Wait until all three descendants exist.
	deadline := time.Now().Add(5 * time.Second)
	var n int
	for {
		procs, err := readProcs()
		if err != nil {
			t.Fatal(err)
		}
		n = len(descendants(procs, root))
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n != 3 {
		t.Fatalf("shell has %d descendants, want 3", n)
	}
	got, err := signalTree(root, syscall.SIGKILL)
	if err != nil || got != 3 {
		t.Fatalf("signalTree = %d, %v; want 3, nil", got, err)
	}
	// The root survives; its descendants die (their zombies are reaped by
	// the shell, or by init for the one whose parent died).
	deadline = time.Now().Add(5 * time.Second)
	for {
		procs, err := readProcs()
		if err != nil {
			t.Fatal(err)
		}
		var live []string
		for _, p := range descendants(procs, root) {
			if p.State != 'Z' {
				live = append(live, strconv.Itoa(p.Pid))
			}
		}
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("descendants still alive: %v", live)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(root, 0); err != nil {
		t.Errorf("root was signalled too: %v", err)
	}
}
