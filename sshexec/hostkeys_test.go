package sshexec

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"
)

// TestHostKeysFiles: known_hosts files are read through inputfile, and what
// knownhosts reports names the real files.
func TestHostKeysFiles(t *testing.T) {
	key, _ := newTestKey(t)
	other, _ := newTestKey(t)
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.5"), Port: 22}
	line := knownhosts.Line([]string{"node1"}, key.PublicKey()) + "\n"
	tests := []struct {
		name    string
		user    string // content; "FIFO" makes a named pipe
		global  string // path
		wantErr string
		is      error
	}{
		{name: "user file known", user: line},
		{name: "global /dev/null", user: line, global: os.DevNull},
		{name: "user file a FIFO", user: "FIFO", wantErr: "named pipe (FIFO)"},
		{name: "global file a device", user: line, global: "/dev/zero", wantErr: "/dev/zero: is a character device"},
		{name: "bad line names the real file", user: "node1 ssh-ed25519 !!!notbase64\n", wantErr: "FILE: no valid entries, line 1"},
		{name: "changed key names the real file and line", user: "# c\n" + knownhosts.Line([]string{"node1"}, other.PublicKey()) + "\n",
			wantErr: "FILE:2", is: ErrHostKeyChanged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "known_hosts")
			if tc.user == "FIFO" {
				if err := syscall.Mkfifo(file, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(file, []byte(tc.user), 0o600); err != nil {
				t.Fatal(err)
			}
			hk := &hostKeys{userFiles: []string{file}}
			if tc.global != "" {
				hk.globalFiles = []string{tc.global}
			}
			done := make(chan error, 1)
			go func() { done <- hk.callback("node1:22")("node1:22", remote, key.PublicKey()) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Second):
				t.Fatal("host key check blocked")
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			want := strings.ReplaceAll(tc.wantErr, "FILE", file)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want it to say %q", err, want)
			}
			if strings.Contains(err.Error(), "/proc/self/fd") {
				t.Errorf("error names the in-memory copy: %v", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v) fails: %v", tc.is, err)
			}
			var hke *HostKeyError
			if errors.As(err, &hke) {
				for _, k := range hke.Known {
					if k.Filename != file {
						t.Errorf("Known names %q, want %q", k.Filename, file)
					}
				}
			}
		})
	}
}

func TestHostKeysRecordRefusesNonRegular(t *testing.T) {
	key, _ := newTestKey(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{os.DevNull, fifo} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			hk := &hostKeys{userFiles: []string{file}, acceptNew: true}
			done := make(chan error, 1)
			go func() { done <- hk.record("node1:22", key.PublicKey()) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("recorded a key into a file that is not one")
				}
				t.Log(err)
			case <-time.After(time.Second):
				t.Fatal("record blocked")
			}
		})
	}
}
