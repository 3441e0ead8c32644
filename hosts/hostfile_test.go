package hosts

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/userr"
)

func readHostfile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "hostfiles", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseHostfileTestdata(t *testing.T) {
	tests := []struct {
		file string
		want []Host
	}{
		// DeepSpeed's test_hostfile_good, indentation, blank lines and comments included.
		{"deepspeed", []Host{
			{Name: "worker-1", Slots: 2}, {Name: "worker-2", Slots: 2},
			{Name: "localhost", Slots: 1}, {Name: "123.23.12.10", Slots: 2},
		}},
		{"openmpi", []Host{
			{Name: "node01"}, {Name: "node02", Slots: 8}, {Name: "node03", Slots: 8},
			{Name: "node04", Slots: 4}, {Name: "node05"}, {Name: "fd00::5", Slots: 2},
		}},
		{"crlf", []Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseHostfile(tt.file, readHostfile(t, tt.file))
			if err != nil {
				t.Fatalf("ParseHostfile: %v", err)
			}
			if !reflect.DeepEqual(withoutImplied(got), withoutImplied(tt.want)) {
				t.Errorf("ParseHostfile = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseHostfile(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Host
	}{
		{"trailing comment", "a slots=2 # rack 1\nb slots=2#rack 2\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}},
		{"tabs", "a\tslots=2\n", []Host{{Name: "a", Slots: 2}}},
		{"no final newline", "a slots=2", []Host{{Name: "a", Slots: 2}}},
		{"mpi bare host", "a\nb\n", []Host{{Name: "a"}, {Name: "b"}}},
		{"mpi colon", "a:2\nb:3\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 3}}},
		{"mixed forms", "a slots=2\nb:2\nc\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}, {Name: "c"}}},
		{"max_slots equal", "a slots=4 max_slots=4", []Host{{Name: "a", Slots: 4}}},
		{"max_slots first", "a max_slots=8 slots=4", []Host{{Name: "a", Slots: 4}}},
		{"colon with max_slots", "a:2 max_slots=4", []Host{{Name: "a", Slots: 2}}},
		{"ipv6 colon", "[fe80::1]:2", []Host{{Name: "fe80::1", Slots: 2}}},
		{"bare ipv6 with slots=", "fd00::5 slots=2\n::1", []Host{{Name: "fd00::5", Slots: 2}, {Name: "::1"}}},
		{"UTF-8 byte order mark skipped", "\xef\xbb\xbfa slots=2\nb slots=2\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}},
		{"CRLF", "a slots=2\r\nb slots=2\r\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}},
		{"CR alone (old Mac)", "a slots=2\rb slots=2\r# c\r", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}},
		{"UTF-8 in a comment", "a slots=2 # nœud de calcul\n", []Host{{Name: "a", Slots: 2}}},
		{"underscores", "gpu_01 slots=8\n", []Host{{Name: "gpu_01", Slots: 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHostfile("hf", []byte(tt.in))
			if err != nil {
				t.Fatalf("ParseHostfile(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(withoutImplied(got), withoutImplied(tt.want)) {
				t.Errorf("ParseHostfile(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseHostfileErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		where string
		words []string
	}{
		// DeepSpeed's test_hostfiles_bad.
		{"duplicate host", "\n    worker-1 slots=2\n    worker-2 slots=1\n    worker-1 slots=1\n", "hostfile:4:5", []string{`duplicate host "worker-1"`, "line 2"}},
		{"incorrect whitespace", "\n    this is bad slots=1\n", "hostfile:2:10", []string{`unexpected "is"`}},
		{"empty", "\n    \n", "hostfile", []string{"no hosts"}},
		{"empty file", "", "hostfile", []string{"no hosts"}},
		{"only comments", "# a\n#b slots=1\n", "hostfile", []string{"no hosts"}},
		// Beyond DeepSpeed's own tests.
		{"stray key", "worker-1 slots=8\nworker-2 slots=8\nworker-3 gpus=8\n", "hostfile:3:10", []string{`unexpected "gpus=8"`, `write "host slots=N"`}},
		{"slots without value", "a slots=", "hostfile:1:3", []string{"missing slot count"}},
		{"slots without equals", "a slots 2", "hostfile:1:3", []string{`unexpected "slots"`}},
		{"slots zero", "a slots=0", "hostfile:1:3", []string{"slot count is 0"}},
		{"slots not a number", "a slots=x", "hostfile:1:3", []string{"not a number"}},
		{"slots twice", "a slots=1 slots=2", "hostfile:1:11", []string{"twice"}},
		{"colon and slots", "a:2 slots=2", "hostfile:1:5", []string{"twice"}},
		{"max below slots", "a slots=8 max_slots=4", "hostfile:1:11", []string{"max_slots=4 is below slots=8"}},
		{"max_slots zero", "a max_slots=0", "hostfile:1:3", []string{"max_slots"}},
		{"max_slots twice", "a max_slots=2 max-slots=3", "hostfile:1:15", []string{"twice"}},
		{"bad host", "a/b slots=1", "hostfile:1:1", []string{"invalid character"}},
		{"option host", "  -oProxyCommand=x slots=1", "hostfile:1:3", []string{"starts with '-'"}},
		{"duplicate crlf", "a slots=1\r\nb slots=1\r\na slots=1\r\n", "hostfile:3:1", []string{"duplicate"}},
		{"duplicate across forms", "a slots=1\na:2", "hostfile:2:1", []string{"duplicate"}},
		{"bad colon count", "a:x", "hostfile:1:3", []string{"not a number"}},
		{"UTF-16 LE", "\xff\xfea\x00 \x00", "hostfile:1:1", []string{"UTF-16", "FFFE"}},
		{"UTF-16 BE", "\xfe\xff\x00a", "hostfile:1:1", []string{"UTF-16", "FEFF"}},
		{"UTF-16 without a byte order mark", "a slots=1\nb\x00 \x00", "hostfile:2:2", []string{"NUL byte", "UTF-16"}},
		{"not UTF-8", "a slots=1\n# r\xe9seau\n", "hostfile:2:4", []string{"byte 0xe9 is not valid UTF-8"}},
		{"not UTF-8 after a BOM", "\xef\xbb\xbf\xc3", "hostfile:1:1", []string{"byte 0xc3"}},
		{"not UTF-8, CR-only file", "a\rb\xff", "hostfile:2:2", []string{"byte 0xff"}},
		{"stray CR inside a line", "a\rb slots=1\nc\n", "hostfile:1:1", []string{`'\r'`}},
		{"empty label", "a..b slots=1", "hostfile:1:1", []string{"empty label"}},
		{"all-digit name", "123 slots=1", "hostfile:1:1", []string{"all digits"}},
		{"ambiguous bare ipv6", "fe80::1:2", "hostfile:1:1", []string{"ambiguous"}},
		{"localhost twice", "localhost slots=1\n127.0.0.1 slots=1\n", "hostfile:2:1", []string{`duplicate host "127.0.0.1": it and "localhost" on line 1 both name this machine`}},
		{"localhost and ::1", "::1\nlocalhost\n", "hostfile:2:1", []string{`"localhost": it and "::1" on line 1`}},
		{"user@host", "me@a slots=1", "hostfile:1:1", []string{"user part"}},
		{"overlong word cut", "a " + strings.Repeat("z", 1000), "hostfile:1:3", []string{"…(1000 bytes)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHostfile("hostfile", []byte(tt.in))
			if err == nil {
				t.Fatalf("ParseHostfile(%q) = %+v, want error", tt.in, got)
			}
			wantInputError(t, err, tt.where, tt.words...)
		})
	}
}

func TestParseHostfileTestdataErrors(t *testing.T) {
	tests := []struct {
		file, where string
	}{
		{"stray-word", "stray-word:3:10"},
		// DeepSpeed's "mix of good/bad": the first bad line is reported.
		// ("missingslots" alone on a line is a valid Open MPI host.)
		{"deepspeed-bad-mix", "deepspeed-bad-mix:3:10"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, err := ParseHostfile(tt.file, readHostfile(t, tt.file))
			wantInputError(t, err, tt.where)
		})
	}
}

func FuzzParseHostfile(f *testing.F) {
	for _, s := range []string{
		"worker-1 slots=2\nworker-2 slots=2\n", "a\nb:2\nc slots=1 max_slots=2\n", "a slots=2 # c\r\n",
		"this is bad slots=1", "", "[fe80::1]:2", "a slots=8 max_slots=4", "a:2 slots=2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hosts, err := ParseHostfile("hf", data)
		if err != nil {
			var ie *userr.InputError
			if !errors.As(err, &ie) || !strings.HasPrefix(ie.Where, "hf") {
				t.Fatalf("error %v is not a userr.InputError located in hf", err)
			}
			return
		}
		if len(hosts) == 0 {
			t.Fatal("no hosts and no error")
		}
		seen := map[string]bool{}
		for _, h := range hosts {
			if h.Name == "" || h.Slots < 0 || h.GPUs != nil || strings.HasPrefix(h.Name, "-") {
				t.Fatalf("bad host %+v", h)
			}
			if seen[hostKey(h.Name)] {
				t.Fatalf("duplicate %q accepted", h.Name)
			}
			seen[hostKey(h.Name)] = true
			if !strings.Contains(string(data), h.Name) {
				t.Fatalf("host %q is not in the file", h.Name)
			}
		}
	})
}

// TestParseHostfileMessage pins the whole message, which users read.
func TestParseHostfileMessage(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"deepspeed file", "worker-1 slots=8\nworker-2 slots=8\nworker-3 gpus=8\n",
			`hostfile:3:10: unexpected "gpus=8" (write "host slots=N")`},
		{"open mpi file", "worker-1\nworker-2:8\nworker-3 gpus=8\n",
			`hostfile:3:10: unexpected "gpus=8" (write "host", "host:N" or "host slots=N [max_slots=M]")`},
		{"duplicate", "a slots=1\n\n  a slots=2\n",
			`hostfile:3:3: duplicate host "a" (first on line 1) (list each host once with its total slots)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHostfile("hostfile", []byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v, want %s", err, tt.want)
			}
		})
	}
}
