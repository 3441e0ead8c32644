package hosts

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gorun/gorun/internal/userr"
)

// wantInputError fails unless err is a *userr.InputError at where whose message
// contains each of words.
func wantInputError(t *testing.T, err error, where string, words ...string) {
	t.Helper()
	var ie *userr.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("error = %v (%T), want *userr.InputError", err, err)
	}
	if ie.Where != where {
		t.Errorf("Where = %q, want %q (error: %v)", ie.Where, where, err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Host
	}{
		{"slots", "h1:8,h2:8", []Host{{Name: "h1", Slots: 8}, {Name: "h2", Slots: 8}}},
		{"slots optional", "h1:8,h2:8,h3", []Host{{Name: "h1", Slots: 8}, {Name: "h2", Slots: 8}, {Name: "h3"}}},
		{"single", "node-01.cluster", []Host{{Name: "node-01.cluster"}}},
		{"ipv4", "10.0.0.1:4,10.0.0.2", []Host{{Name: "10.0.0.1", Slots: 4}, {Name: "10.0.0.2"}}},
		{"ipv6", "[fe80::1]:8,[2001:db8::2]", []Host{{Name: "fe80::1", Slots: 8}, {Name: "2001:db8::2"}}},
		{"spaces around items", " h1:2 , h2:2", []Host{{Name: "h1", Slots: 2}, {Name: "h2", Slots: 2}}},
		{"underscore", "gpu_node_1:1", []Host{{Name: "gpu_node_1", Slots: 1}}},
		{"underscore at a label's ends", "_a_.b:1", []Host{{Name: "_a_.b", Slots: 1}}},
		{"bare ipv6", "fe80::1,2001:db8::2,::1", []Host{{Name: "fe80::1"}, {Name: "2001:db8::2"}, {Name: "::1"}}},
		{"ipv6 with a zone", "[fe80::1%eth0]:2,fe80::2%ib0", []Host{{Name: "fe80::1%eth0", Slots: 2}, {Name: "fe80::2%ib0"}}},
		{"full ipv6, bare", "2001:db8:1:2:3:4:5:6", []Host{{Name: "2001:db8:1:2:3:4:5:6"}}},
		{"localhost alone", "localhost:2", []Host{{Name: "localhost", Slots: 2}}},
		{"label of 63", strings.Repeat("x", 63) + ".a", []Host{{Name: strings.Repeat("x", 63) + ".a"}}},
		{"name of 253", strings.Repeat("abcdefg.", 31) + "abcde", []Host{{Name: strings.Repeat("abcdefg.", 31) + "abcde"}}},
		{"digits inside labels", "1a.2b,n01.r2", []Host{{Name: "1a.2b"}, {Name: "n01.r2"}}},
		{"uppercase", "GPU-A:1", []Host{{Name: "GPU-A", Slots: 1}}},
		{"leading zero count", "h1:08", []Host{{Name: "h1", Slots: 8}}},
		{"slurm hostlist", "gpu[01-03]:8", []Host{{Name: "gpu01", Slots: 8}, {Name: "gpu02", Slots: 8}, {Name: "gpu03", Slots: 8}}},
		{"slurm hostlist with commas, beside others", "a[1,3]:2,b:4,[fe80::1]:1", []Host{{Name: "a1", Slots: 2}, {Name: "a3", Slots: 2}, {Name: "b", Slots: 4}, {Name: "fe80::1", Slots: 1}}},
		{"slurm hostlist without a count", "n[9-10]", []Host{{Name: "n9"}, {Name: "n10"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		where string
		words []string
	}{
		{"empty", "", "--hosts", []string{"empty host list"}},
		{"hostlist duplicate", "a[1-2],a1", "--hosts (col 8)", []string{`duplicate host "a1"`}},
		{"hostlist descending", "h1,gpu[3-1]:8", "--hosts (col 4)", []string{`"gpu[3-1]"`, "hostlist"}},
		{"hostlist unclosed", "gpu[1-3:8", "--hosts (col 1)", []string{"unclosed"}},
		{"hostlist zero slots", "gpu[1-2]:0", "--hosts (col 10)", []string{"slot count is 0"}},
		{"blank", "  ", "--hosts", []string{"empty host list"}},
		{"empty item middle", "h1,,h2", "--hosts (col 4)", []string{"empty item"}},
		{"trailing comma", "h1:8,", "--hosts (col 6)", []string{"empty item"}},
		{"leading comma", ",h1", "--hosts (col 1)", []string{"empty item"}},
		{"duplicate", "h1:8,h2:8,h1:4", "--hosts (col 11)", []string{`duplicate host "h1"`, "col 1"}},
		{"duplicate case", "h1,H1", "--hosts (col 4)", []string{`duplicate host "H1" (the same host as "h1" at col 1)`}},
		{"duplicate ipv6 spellings", "[fe80::1],[fe80:0::1]", "--hosts (col 11)", []string{"duplicate"}},
		{"zero slots", "h1:0", "--hosts (col 4)", []string{"slot count is 0"}},
		{"bad slots", "h1:eight", "--hosts (col 4)", []string{`"eight" is not a number`}},
		{"negative slots", "h1:-1", "--hosts (col 4)", []string{"not a number"}},
		{"missing slots", "h1:", "--hosts (col 4)", []string{"missing slot count"}},
		{"huge slots", "h1:99999999999999999999", "--hosts (col 4)", []string{"too large"}},
		{"missing name", ":8", "--hosts (col 1)", []string{"missing host name"}},
		{"bare ipv6 that could hold a count", "fe80::1:8", "--hosts (col 1)", []string{"ambiguous", "[fe80::1:8]", "[fe80::1]:8"}},
		{"bare ipv6 ending in a count", "2001:db8::2:1", "--hosts (col 1)", []string{"ambiguous"}},
		{"two colons, not an address", "h:1:2", "--hosts (col 1)", []string{"more than one ':'"}},
		{"empty label", "a..b", "--hosts (col 1)", []string{"empty label"}},
		{"leading dot", ".a", "--hosts (col 1)", []string{"starts with '.'"}},
		{"trailing dot", "a.:2", "--hosts (col 1)", []string{"ends with '.'"}},
		{"label starts with a hyphen", "a.-b", "--hosts (col 1)", []string{`label "-b"`}},
		{"label ends with a hyphen", "a-.b", "--hosts (col 1)", []string{`label "a-"`}},
		{"label of 64", strings.Repeat("x", 64) + ".com", "--hosts (col 1)", []string{"label of 64 characters"}},
		{"name of 254", strings.Repeat("abcdefg.", 31) + "abcdef", "--hosts (col 1)", []string{"254 characters long"}},
		{"all-digit name", "h1,123", "--hosts (col 4)", []string{"all digits"}},
		{"short IPv4 form", "10.1", "--hosts (col 1)", []string{"not an IPv4 address"}},
		{"IPv4 out of range", "10.0.0.256:2", "--hosts (col 1)", []string{"not an IPv4 address"}},
		{"IPv4 with leading zeros", "010.0.0.1", "--hosts (col 1)", []string{"not an IPv4 address"}},
		{"not UTF-8", "h\xff", "--hosts (col 1)", []string{"byte 0xff, which is not UTF-8"}},
		{"UTF-8 letter, shown as itself", "nœud", "--hosts (col 1)", []string{"invalid character 'œ'"}},
		{"control character, escaped", "a\x1bb", "--hosts (col 1)", []string{`"a\x1bb"`, `'\x1b'`}},
		{"space inside", "a b", "--hosts (col 1)", []string{"invalid character ' '"}},
		{"zone with a space", "[fe80::1%a b]", "--hosts (col 1)", []string{"zone that is not an interface name"}},
		{"zone with a quote", "fe80::1%eth0'", "--hosts (col 1)", []string{"zone"}},
		{"localhost and 127.0.0.1", "localhost:1,127.0.0.1:1", "--hosts (col 13)", []string{`"127.0.0.1": it and "localhost" at col 1 both name this machine`}},
		{"localhost and ::1", "[::1],LocalHost", "--hosts (col 7)", []string{`"LocalHost"`, `"::1" at col 1`}},
		{"127.0.0.1 and 127.0.0.2", "127.0.0.1,127.0.0.2", "--hosts (col 11)", []string{"this machine"}},
		{"mapped IPv4", "10.0.0.1,::ffff:10.0.0.1", "--hosts (col 10)", []string{`(the same host as "10.0.0.1" at col 1)`}},
		{"overlong name cut", strings.Repeat("x", 300), "--hosts (col 1)", []string{"…(300 bytes)"}},
		{"unclosed bracket", "[fe80::1:8", "--hosts (col 1)", []string{"unclosed"}},
		{"bracketed name", "[node1]:8", "--hosts (col 2)", []string{"not an IPv6 address"}},
		{"bracketed ipv4", "[10.0.0.1]:8", "--hosts (col 2)", []string{"not an IPv6 address"}},
		{"junk after bracket", "[fe80::1]x", "--hosts (col 10)", []string{`unexpected "x"`}},
		{"option-like name", "h1,-oProxyCommand=x", "--hosts (col 4)", []string{"starts with '-'"}},
		{"invalid char", "h1,h/2", "--hosts (col 4)", []string{"invalid character"}},
		{"user at host", "me@h1", "--hosts (col 1)", []string{"user part", "--ssh-user"}},
		{"at sign alone", "@h1", "--hosts (col 1)", []string{"invalid character '@'"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error", tt.in, got)
			}
			wantInputError(t, err, tt.where, tt.words...)
		})
	}
}

func TestResolve(t *testing.T) {
	slurm := env(map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_GPUS_ON_NODE": "4"})
	noEnv := env(nil)
	hostfile := []byte("w1 slots=2\nw2 slots=2\n")
	tests := []struct {
		name             string
		hosts, file      string
		data             []byte
		include, exclude string
		getenv           func(string) string
		want             []Host
	}{
		{name: "nothing: local mode", getenv: noEnv, want: nil},
		{name: "hosts flag", hosts: "a:2,b", getenv: noEnv, want: []Host{{Name: "a", Slots: 2}, {Name: "b"}}},
		{name: "hostfile", file: "hf", data: hostfile, getenv: noEnv, want: []Host{{Name: "w1", Slots: 2}, {Name: "w2", Slots: 2}}},
		{name: "slurm", getenv: slurm, want: []Host{{Name: "n1", Slots: 4}, {Name: "n2", Slots: 4}}},
		{name: "flag wins over slurm", hosts: "a:1", getenv: slurm, want: []Host{{Name: "a", Slots: 1}}},
		{name: "hostfile wins over slurm", file: "hf", data: hostfile, getenv: slurm, want: []Host{{Name: "w1", Slots: 2}, {Name: "w2", Slots: 2}}},
		{name: "include on hosts", hosts: "a:4,b:4", include: "b:1,3", getenv: noEnv, want: []Host{{Name: "b", Slots: 2, GPUs: []int{1, 3}}}},
		{name: "exclude on slurm", exclude: "n1", getenv: slurm, want: []Host{{Name: "n2", Slots: 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.hosts, tt.file, tt.data, tt.include, tt.exclude, tt.getenv)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if !reflect.DeepEqual(withoutImplied(got), withoutImplied(tt.want)) {
				t.Errorf("Resolve = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	noEnv := env(nil)
	tests := []struct {
		name             string
		hosts, file      string
		data             []byte
		include, exclude string
		getenv           func(string) string
		where            string
		words            []string
	}{
		{name: "hosts and hostfile", hosts: "a", file: "hf", data: []byte("a slots=1"), getenv: noEnv, where: "--hosts", words: []string{"--hostfile"}},
		{name: "include and exclude", hosts: "a:2", include: "a", exclude: "a:1", getenv: noEnv, where: "--include", words: []string{"mutually exclusive"}},
		{name: "include in local mode", include: "localhost:1", getenv: noEnv, where: "--include", words: []string{"needs a host list"}},
		{name: "exclude in local mode", exclude: "localhost", getenv: noEnv, where: "--exclude", words: []string{"needs a host list"}},
		{name: "exclude everything", hosts: "a:2", exclude: "a", getenv: noEnv, where: "--exclude", words: []string{"removed every host"}},
		{name: "bad hosts flag", hosts: "a,,b", getenv: noEnv, where: "--hosts (col 3)"},
		{name: "bad hostfile", file: "hf", data: []byte("a gpus=2"), getenv: noEnv, where: "hf:1:3"},
		{name: "bad slurm", getenv: env(map[string]string{"SLURM_JOB_NODELIST": "n[2-1]"}), where: "SLURM_JOB_NODELIST (col 3)"},
		{name: "unknown include host", hosts: "a", include: "b", getenv: noEnv, where: "--include (col 1)", words: []string{`"b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.hosts, tt.file, tt.data, tt.include, tt.exclude, tt.getenv)
			if err == nil {
				t.Fatalf("Resolve = %+v, want error", got)
			}
			wantInputError(t, err, tt.where, tt.words...)
		})
	}
}

// TestHostJSON pins the JSON main prints for hosts: unknown GPUs are null,
// known ones a list.
func TestHostJSON(t *testing.T) {
	hosts, err := ApplyIncludeExclude([]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}, "a@b:0,1", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(hosts)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"host":"a","slots":2,"gpus":null},{"host":"b","slots":2,"gpus":[0,1]}]`
	if string(got) != want {
		t.Errorf("json = %s, want %s", got, want)
	}
}

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"h1:8,h2:8,h3", "[fe80::1]:8", "a,,b", "h:0", "[x]:1", "10.0.0.1:4", "h1,H1", "-x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		hosts, err := Parse(list)
		if err != nil {
			var ie *userr.InputError
			if !errors.As(err, &ie) || ie.Where == "" {
				t.Fatalf("Parse(%q): error %v is not a userr.InputError with Where", list, err)
			}
			return
		}
		seen := map[string]bool{}
		for _, h := range hosts {
			if problem, _ := hostNameProblem(h.Name); problem != "" || h.Slots < 0 || h.GPUs != nil {
				t.Fatalf("Parse(%q): bad host %+v (%s)", list, h, problem)
			}
			if seen[hostKey(h.Name)] {
				t.Fatalf("Parse(%q): duplicate %q accepted", list, h.Name)
			}
			seen[hostKey(h.Name)] = true
		}
		if len(hosts) != strings.Count(list, ",")+1 {
			t.Fatalf("Parse(%q) = %d hosts for %d items", list, len(hosts), strings.Count(list, ",")+1)
		}
	})
}

// FuzzResolve feeds arbitrary input through every host source (the
// --hosts flag, a hostfile, a Slurm node list) and the --include/--exclude
// filter. Whatever the input, Resolve returns either a complete
// userr.InputError whose message is one printable line of bounded length, or
// hosts whose names are valid (hostNameProblem), none the same machine as
// another, that read back the same when written as a --hosts list.
func FuzzResolve(f *testing.F) {
	seeds := []struct {
		hosts string
		file  string
		slurm string
		filt  string
		excl  bool
	}{
		{hosts: "h1:8,h2:8,h3"},
		{hosts: "localhost:1,127.0.0.1:1"},
		{hosts: "[fe80::1]:8,fe80::2,gpu_01"},
		{hosts: "a..b,-x,me@h,\x1b[2J"},
		{file: "worker-1 slots=2\nworker-2 slots=2\n", filt: "worker-1:0"},
		{file: "\xef\xbb\xbfa slots=2\r\nb:2\r\n", filt: "a", excl: true},
		{file: "\xff\xfea\x00"},
		{file: "a\rb\r::1 slots=1\r"},
		{slurm: "n[1-3],m[01-02]", filt: "n2@m01:1"},
		{slurm: "n[1-2],n2"},
		{slurm: "[1-3]"},
		{hosts: "a:2,b:2", slurm: "n[1-2]", filt: "b:1", excl: true},
	}
	for _, s := range seeds {
		f.Add(s.hosts, []byte(s.file), s.slurm, s.filt, s.excl)
	}
	f.Fuzz(func(t *testing.T, hostsFlag string, file []byte, slurm, filter string, exclude bool) {
		fileName := ""
		if len(file) > 0 {
			fileName = "hf"
		}
		include, excl := filter, ""
		if exclude {
			include, excl = "", filter
		}
		getenv := env(map[string]string{"SLURM_JOB_NODELIST": slurm, "SLURM_GPUS_ON_NODE": "4"})
		got, err := Resolve(hostsFlag, fileName, file, include, excl, getenv)
		if err != nil {
			var ie *userr.InputError
			if !errors.As(err, &ie) || ie.Where == "" || ie.Problem == "" || ie.Fix == "" {
				t.Fatalf("error %v (%T) is not a complete userr.InputError", err, err)
			}
			msg := err.Error()
			if strings.ContainsFunc(msg, userr.UnsafeRune) || !utf8.ValidString(msg) || len(msg) > 2048 {
				t.Fatalf("message %q is not one bounded printable line", msg)
			}
			return
		}
		if got == nil {
			if hostsFlag != "" || fileName != "" || slurm != "" || filter != "" {
				t.Fatalf("local mode for hosts %q, file %q, slurm %q, filter %q", hostsFlag, file, slurm, filter)
			}
			return
		}
		seen := map[string]string{}
		var list []string
		for _, h := range got {
			if problem, _ := hostNameProblem(h.Name); problem != "" {
				t.Fatalf("host %q accepted: %s", h.Name, problem)
			}
			if first, dup := seen[hostKey(h.Name)]; dup {
				t.Fatalf("hosts %q and %q are one machine", first, h.Name)
			}
			seen[hostKey(h.Name)] = h.Name
			if h.Slots < 0 || h.GPUs != nil && h.Slots != len(h.GPUs) {
				t.Fatalf("bad slots in %+v", h)
			}
			item := h.Name
			if strings.Contains(item, ":") {
				item = "[" + item + "]"
			}
			if h.Slots > 0 {
				item += ":" + strconv.Itoa(h.Slots)
			}
			list = append(list, item)
		}
		back, err := Parse(strings.Join(list, ","))
		if err != nil {
			t.Fatalf("%q does not read back: %v", list, err)
		}
		for i, h := range back {
			if h.Name != got[i].Name || h.Slots != got[i].Slots {
				t.Fatalf("%+v reads back as %+v", got[i], h)
			}
		}
	})
}
