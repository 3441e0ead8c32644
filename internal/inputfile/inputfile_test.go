package inputfile

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := func(name string) string {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	socket := func(name string) string {
		p := filepath.Join(dir, name)
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return p
	}
	regular := write("hosts", []byte("node1 slots=8\n"))
	big := bytes.Repeat([]byte("x"), 3*1<<20+1<<18) // 3.25 MiB

	tests := []struct {
		name    string
		path    string
		max     int64
		want    string
		errIs   error
		errText string // in the message
	}{
		{name: "regular", path: regular, max: DefaultMax, want: "node1 slots=8\n"},
		{name: "exactly the limit", path: regular, max: int64(len("node1 slots=8\n")), want: "node1 slots=8\n"},
		{name: "empty", path: write("empty", nil), max: DefaultMax, want: ""},
		{name: "empty path", path: "", max: DefaultMax, errText: "empty file name"},
		{name: "missing", path: filepath.Join(dir, "nope"), max: DefaultMax, errIs: fs.ErrNotExist, errText: "nope"},
		{name: "directory", path: dir, max: DefaultMax, errIs: ErrNotRegular, errText: "is a directory, not a regular file"},
		{name: "FIFO without a writer", path: fifo("fifo"), max: DefaultMax, errIs: ErrNotRegular, errText: "is a named pipe (FIFO), not a regular file"},
		{name: "socket", path: socket("sock"), max: DefaultMax, errIs: ErrNotRegular, errText: "is a socket, not a regular file"},
		{name: "/dev/zero", path: "/dev/zero", max: DefaultMax, errIs: ErrNotRegular, errText: "/dev/zero: is a character device"},
		{name: "/dev/urandom", path: "/dev/urandom", max: DefaultMax, errIs: ErrNotRegular, errText: "/dev/urandom: is a character device"},
		{name: "too large", path: write("big", big), max: DefaultMax, errIs: ErrTooLarge, errText: "it is 3.2 MiB; the limit is 1 MiB"},
		{name: "one byte over", path: regular, max: 4, errIs: ErrTooLarge, errText: "it is 14 bytes; the limit is 4 bytes"},
		{name: "symlink to a regular file", path: link("hosts-link", regular), max: DefaultMax, want: "node1 slots=8\n"},
		{name: "symlink to a FIFO", path: link("fifo-link", fifo("fifo2")), max: DefaultMax, errIs: ErrNotRegular, errText: "named pipe (FIFO)"},
		{name: "dangling symlink", path: link("dangling", filepath.Join(dir, "gone")), max: DefaultMax, errIs: fs.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				b   []byte
				err error
			}
			done := make(chan result, 1)
			go func() {
				b, err := Read(tc.path, tc.max)
				done <- result{b, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(500 * time.Millisecond):
				t.Fatalf("Read(%q) still blocked after 500 ms", tc.path)
			}
			if tc.errIs == nil && tc.errText == "" {
				if res.err != nil {
					t.Fatalf("err = %v", res.err)
				}
				if string(res.b) != tc.want {
					t.Errorf("got %q, want %q", res.b, tc.want)
				}
				return
			}
			if res.err == nil {
				t.Fatalf("got %d bytes and no error", len(res.b))
			}
			if tc.errIs != nil && !errors.Is(res.err, tc.errIs) {
				t.Errorf("err = %v, want errors.Is %v", res.err, tc.errIs)
			}
			if !strings.Contains(res.err.Error(), tc.errText) {
				t.Errorf("err = %q, want it to say %q", res.err, tc.errText)
			}
			if res.b != nil {
				t.Errorf("got %d bytes with the error", len(res.b))
			}
		})
	}
}

func TestReadInfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(p, []byte("key"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	b, st, err := ReadInfo(p, DefaultMax)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "key" || st.Mode().Perm() != 0o640 || st.Size() != 3 {
		t.Errorf("got %q, mode %v, size %d", b, st.Mode(), st.Size())
	}
	if _, st, err := ReadInfo("/dev/null", DefaultMax); err == nil || st != nil {
		t.Errorf("/dev/null: info %v, err %v", st, err)
	}
}

func TestSize(t *testing.T) {
	tests := []struct {
		name string
		n    int64
		want string
	}{
		{"zero", 0, "0 bytes"},
		{"bytes", 1023, "1023 bytes"},
		{"one KiB", 1024, "1 KiB"},
		{"one MiB", 1 << 20, "1 MiB"},
		{"fraction", 3*1<<20 + 1<<18, "3.2 MiB"},
		{"GiB", 5 << 30, "5 GiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := size(tc.n); got != tc.want {
				t.Errorf("size(%d) = %q, want %q", tc.n, got, tc.want)
			}
		})
	}
}
