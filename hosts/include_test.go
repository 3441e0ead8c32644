package hosts

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/userr"
)

func TestApplyIncludeExclude(t *testing.T) {
	one := []Host{{Name: "worker-0", Slots: 4}}
	two := []Host{{Name: "worker-0", Slots: 4}, {Name: "worker-1", Slots: 4}}
	gpus := func(name string, ids ...int) Host { return Host{Name: name, Slots: len(ids), GPUs: ids} }
	tests := []struct {
		name             string
		hosts            []Host
		include, exclude string
		want             []Host
	}{
		// DeepSpeed's test_parser_local.
		{name: "no filter", hosts: one, want: one},
		{name: "exclude slot", hosts: one, exclude: "worker-0:1", want: []Host{gpus("worker-0", 0, 2, 3)}},
		{name: "exclude slots", hosts: one, exclude: "worker-0:1,2", want: []Host{gpus("worker-0", 0, 3)}},
		{name: "include one slot", hosts: one, include: "worker-0:1", want: []Host{gpus("worker-0", 1)}},
		{name: "include slot twice", hosts: one, include: "worker-0:1,1", want: []Host{gpus("worker-0", 1)}},
		{name: "include host twice", hosts: one, include: "worker-0:1@worker-0:0,1", want: []Host{gpus("worker-0", 0, 1)}},
		{name: "include whole host", hosts: one, include: "worker-0", want: one},
		{name: "exclude whole host", hosts: one, exclude: "worker-0", want: nil},
		{name: "exclude all slots", hosts: one, exclude: "worker-0:0,1,2,3", want: nil},
		// DeepSpeed's test_parser_multinode.
		{name: "multinode no filter", hosts: two, want: two},
		{name: "include a node", hosts: two, include: "worker-1:0,3", want: []Host{gpus("worker-1", 0, 3)}},
		{name: "exclude a node", hosts: two, exclude: "worker-1", want: []Host{{Name: "worker-0", Slots: 4}}},
		{name: "exclude part of each", hosts: two, exclude: "worker-0:0,1@worker-1:3", want: []Host{gpus("worker-0", 2, 3), gpus("worker-1", 0, 1, 2)}},
		// Beyond DeepSpeed's tests.
		{name: "include keeps host order", hosts: two, include: "worker-1@worker-0:2", want: []Host{gpus("worker-0", 2), {Name: "worker-1", Slots: 4}}},
		{name: "include sorts ids", hosts: one, include: "worker-0:3,0,2", want: []Host{gpus("worker-0", 0, 2, 3)}},
		{name: "unknown slots include ids", hosts: []Host{{Name: "a"}}, include: "a:5,1", want: []Host{gpus("a", 1, 5)}},
		{name: "unknown slots include whole", hosts: []Host{{Name: "a"}, {Name: "b"}}, include: "b", want: []Host{{Name: "b"}}},
		{name: "unknown slots exclude whole", hosts: []Host{{Name: "a"}, {Name: "b"}}, exclude: "a", want: []Host{{Name: "b"}}},
		{name: "filter on set GPUs", hosts: []Host{gpus("a", 2, 5, 7)}, exclude: "a:5", want: []Host{gpus("a", 2, 7)}},
		{name: "case-insensitive names", hosts: two, include: "WORKER-1:0", want: []Host{gpus("worker-1", 0)}},
		{name: "ipv6", hosts: []Host{{Name: "fe80::1", Slots: 2}}, include: "[fe80::1]:1", want: []Host{gpus("fe80::1", 1)}},
		{name: "localhost named by its address", hosts: []Host{{Name: "localhost", Slots: 2}}, include: "127.0.0.1:1", want: []Host{gpus("localhost", 1)}},
		{name: "underscore name", hosts: []Host{{Name: "gpu_01", Slots: 2}, {Name: "b"}}, exclude: "gpu_01", want: []Host{{Name: "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := cloneHosts(tt.hosts)
			got, err := ApplyIncludeExclude(in, tt.include, tt.exclude)
			if err != nil {
				t.Fatalf("ApplyIncludeExclude(%q, %q): %v", tt.include, tt.exclude, err)
			}
			if len(got) == 0 && len(tt.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ApplyIncludeExclude(%q, %q) = %+v, want %+v", tt.include, tt.exclude, got, tt.want)
			}
			if !reflect.DeepEqual(in, tt.hosts) {
				t.Errorf("input modified: %+v", in)
			}
		})
	}
}

func TestApplyIncludeExcludeErrors(t *testing.T) {
	two := []Host{{Name: "worker-0", Slots: 4}, {Name: "worker-1", Slots: 4}}
	tests := []struct {
		name             string
		hosts            []Host
		include, exclude string
		where            string
		words            []string
	}{
		// DeepSpeed's test_parser_mutual_exclusive and test_parser_errors.
		{name: "mutually exclusive", hosts: two, include: "A", exclude: "B", where: "--include", words: []string{"mutually exclusive"}},
		{name: "include unknown host", hosts: two, include: "jeff", where: "--include (col 1)", words: []string{`"jeff"`}},
		{name: "exclude unknown host", hosts: two, exclude: "jeff", where: "--exclude (col 1)", words: []string{`"jeff"`}},
		{name: "include missing slot", hosts: two, include: "worker-1:4", where: "--include (col 1)", words: []string{"no GPU 4", "0,1,2,3"}},
		{name: "exclude missing slot", hosts: two, exclude: "worker-1:4", where: "--exclude (col 1)", words: []string{"no GPU 4"}},
		{name: "formatting", hosts: two, exclude: "worker-1@worker-0:1@5", where: "--exclude (col 21)", words: []string{`"5"`}},
		// Beyond DeepSpeed's tests.
		{name: "empty node", hosts: two, include: "worker-0@@worker-1", where: "--include (col 10)", words: []string{"empty node"}},
		{name: "trailing at", hosts: two, include: "worker-0@", where: "--include (col 10)", words: []string{"empty node"}},
		{name: "empty id", hosts: two, include: "worker-0:1,", where: "--include (col 10)", words: []string{"empty GPU id"}},
		{name: "no ids after colon", hosts: two, include: "worker-0:", where: "--include (col 10)", words: []string{"empty GPU id"}},
		{name: "bad id", hosts: two, include: "worker-0:x", where: "--include (col 10)", words: []string{`"x" is not a number`}},
		{name: "negative id", hosts: two, include: "worker-0:-1", where: "--include (col 10)", words: []string{"not a number"}},
		{name: "second item located", hosts: two, include: "worker-0@worker-1:9", where: "--include (col 10)", words: []string{"no GPU 9"}},
		{name: "exclude ids on unknown slots", hosts: []Host{{Name: "a"}}, exclude: "a:0", where: "--exclude (col 1)", words: []string{"unknown slot count"}},
		{name: "include id outside set GPUs", hosts: []Host{{Name: "a", Slots: 2, GPUs: []int{4, 5}}}, include: "a:0", where: "--include (col 1)", words: []string{"no GPU 0", "4,5"}},
		{name: "two colons", hosts: two, include: "worker-0:1:2", where: "--include (col 10)", words: []string{"not a number"}},
		{name: "empty label", hosts: two, include: "worker-0@a..b", where: "--include (col 10)", words: []string{"empty label"}},
		{name: "option-like name", hosts: two, exclude: "-oProxyCommand=x", where: "--exclude (col 1)", words: []string{"starts with '-'"}},
		{name: "control character escaped", hosts: two, include: "w\x1b[2J", where: "--include (col 1)", words: []string{`"w\x1b[2J"`}},
		{name: "unclosed bracket", hosts: two, include: "[fe80::1:0", where: "--include (col 1)", words: []string{"invalid character '['"}},
		{name: "overlong name cut", hosts: two, include: strings.Repeat("w", 500), where: "--include (col 1)", words: []string{"…(500 bytes)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ApplyIncludeExclude(tt.hosts, tt.include, tt.exclude)
			if err == nil {
				t.Fatalf("ApplyIncludeExclude(%q, %q) = %+v, want error", tt.include, tt.exclude, got)
			}
			wantInputError(t, err, tt.where, tt.words...)
		})
	}
}

func cloneHosts(hosts []Host) []Host {
	if hosts == nil {
		return nil
	}
	out := make([]Host, len(hosts))
	for i, h := range hosts {
		out[i] = cloneHost(h)
	}
	return out
}

func FuzzApplyIncludeExclude(f *testing.F) {
	f.Add("worker-0:1,2", "")
	f.Add("", "worker-0:0,1@worker-1:3")
	f.Add("worker-1@worker-0:1@5", "")
	f.Add("", "c:0")
	f.Add("c:3,1", "")
	f.Add("@@", "")
	base := []Host{{Name: "worker-0", Slots: 4}, {Name: "worker-1", Slots: 2}, {Name: "c"}, {Name: "d", Slots: 3, GPUs: []int{1, 4, 6}}}
	f.Fuzz(func(t *testing.T, include, exclude string) {
		in := cloneHosts(base)
		got, err := ApplyIncludeExclude(in, include, exclude)
		if !reflect.DeepEqual(in, base) {
			t.Fatalf("input modified: %+v", in)
		}
		if err != nil {
			var ie *userr.InputError
			if !errors.As(err, &ie) || ie.Where == "" {
				t.Fatalf("error %v is not a userr.InputError with Where", err)
			}
			return
		}
		last := -1
		for _, h := range got {
			i := slices.IndexFunc(base, func(b Host) bool { return b.Name == h.Name })
			if i <= last {
				t.Fatalf("host %q unknown or out of order in %+v", h.Name, got)
			}
			last = i
			if h.GPUs != nil {
				if h.Slots != len(h.GPUs) || len(h.GPUs) == 0 || !slices.IsSorted(h.GPUs) || len(slices.Compact(slices.Clone(h.GPUs))) != len(h.GPUs) {
					t.Fatalf("bad GPUs in %+v", h)
				}
				if avail, ok := available(base[i]); ok {
					for _, id := range h.GPUs {
						if !slices.Contains(avail, id) {
							t.Fatalf("%+v uses GPU %d it does not have", h, id)
						}
					}
				}
			}
		}
		if exclude != "" && include == "" {
			for _, h := range got {
				if strings.Contains(exclude, h.Name) && h.GPUs == nil && !strings.Contains(exclude, h.Name+":") {
					t.Fatalf("excluded host %q kept: %+v", h.Name, got)
				}
			}
		}
	})
}
