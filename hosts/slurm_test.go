package hosts

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/userr"
)

// Expected expansions follow Slurm's hostlist.c (_hostlist_create_bracketed,
// _push_range_list, _parse_single_range): what `scontrol show hostnames`
// prints for the same expression.
func TestExpandSlurmHostlist(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{"node1", []string{"node1"}},
		{"node[1-3,5]", []string{"node1", "node2", "node3", "node5"}},
		{"n[001-003]", []string{"n001", "n002", "n003"}},
		{"n[8-11]", []string{"n8", "n9", "n10", "n11"}},
		{"n[098-101]", []string{"n098", "n099", "n100", "n101"}},
		{"n[1-010]", []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}}, // width from the low bound
		{"n[01-3,7]", []string{"n01", "n02", "n03", "n7"}},
		{"n[5]", []string{"n5"}},
		{"n[5-5]", []string{"n5"}},
		{"rack[1-2]-n[01-02]", []string{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
		{"a[1-2]b[3-4]c[5,6]", []string{"a1b3c5", "a1b3c6", "a1b4c5", "a1b4c6", "a2b3c5", "a2b3c6", "a2b4c5", "a2b4c6"}},
		{"a[1-2][3-4]", []string{"a13", "a14", "a23", "a24"}},
		{"a1,b[2-3]", []string{"a1", "b2", "b3"}},
		{"gpu-a[1-2],gpu-b[1,3],login", []string{"gpu-a1", "gpu-a2", "gpu-b1", "gpu-b3", "login"}},
		{"n[1-2],n[1-2]", []string{"n1", "n2", "n1", "n2"}}, // duplicates kept
		{"n[1-3,2]", []string{"n1", "n2", "n3", "n2"}},
		{"n1 n2\tn3", []string{"n1", "n2", "n3"}}, // Slurm also splits on spaces and tabs
		{"n1,,n2,", []string{"n1", "n2"}},         // consecutive separators skipped
		{"[1-3]", []string{"1", "2", "3"}},
		{"host.example.com,h_1", []string{"host.example.com", "h_1"}},
		{"", nil},
		{strings.Repeat("x", 1024), []string{strings.Repeat("x", 1024)}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := ExpandSlurmHostlist(tt.expr)
			if err != nil {
				t.Fatalf("ExpandSlurmHostlist(%q): %v", tt.expr, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ExpandSlurmHostlist(%q) = %q, want %q", tt.expr, got, tt.want)
			}
		})
	}
}

func TestExpandSlurmHostlistLarge(t *testing.T) {
	got, err := ExpandSlurmHostlist("n[0001-4096]")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4096 || got[0] != "n0001" || got[4095] != "n4096" {
		t.Errorf("got %d names, first %q, last %q", len(got), got[0], got[len(got)-1])
	}
	got, err = ExpandSlurmHostlist("r[1-256]n[1-256]") // exactly the limit
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxHostlist || got[len(got)-1] != "r256n256" {
		t.Errorf("got %d names, last %q", len(got), got[len(got)-1])
	}
}

func TestExpandSlurmHostlistErrors(t *testing.T) {
	const src = "SLURM_JOB_NODELIST"
	tests := []struct {
		expr  string
		where string
		words []string
	}{
		{"n[1-3", src + " (col 2)", []string{"unclosed '['"}},
		{"n1-3]", src + " (col 5)", []string{"']' without '['"}},
		{"n[1,[2]]", src + " (col 5)", []string{"nested"}},
		{"n[3-1]", src + " (col 3)", []string{"descending"}},
		{"n[1,3-1]", src + " (col 5)", []string{"descending", `"3-1"`}},
		{"n[]", src + " (col 3)", []string{"empty range"}},
		{"n[1,]", src + " (col 5)", []string{"empty range"}},
		{"n[,1]", src + " (col 3)", []string{"empty range"}},
		{"n[1-]", src + " (col 3)", []string{"empty range"}},
		{"n[-1]", src + " (col 3)", []string{"empty range"}},
		{"n[1--2]", src + " (col 3)", []string{"not a number"}},
		{"n[a-c]", src + " (col 3)", []string{"not a number"}},
		{"n[1x2]", src + " (col 3)", []string{"not a number"}},
		{"n[ 1]", src + " (col 3)", []string{"not a number"}},
		{"n[1-2]-ib", src + " (col 7)", []string{`"-ib" follows`}},
		{"a,n[1-2]x,b", src + " (col 9)", []string{`"x" follows`}},
		{"n/1", src + " (col 2)", []string{"invalid character"}},
		{"a,n@1", src + " (col 4)", []string{"invalid character"}},
		{"a,-n1", src + " (col 3)", []string{"starts with '-'"}},
		{"n[0-65536]", src + " (col 3)", []string{"more than 65536"}},
		{"n[0-99999999999]", src + " (col 3)", []string{"more than 65536"}},
		{"n[1-99999999999999999999]", src + " (col 3)", []string{"too large"}},
		{"r[1-256]n[1-257]", src + " (col 1)", []string{"more than 65536"}},
		{"a[1-60000],b[1-6000]", src + " (col 12)", []string{"more than 65536"}},
		{"a[0-999999999].b[0-9]", src + " (col 3)", []string{"more than 65536"}},
		{"a," + strings.Repeat("x", 1025), src + " (col 3)", []string{"longer than 1024"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := ExpandSlurmHostlist(tt.expr)
			if err == nil {
				t.Fatalf("ExpandSlurmHostlist(%q) = %d names, want error", tt.expr, len(got))
			}
			wantInputError(t, err, tt.where, tt.words...)
		})
	}
}

func TestFromSlurm(t *testing.T) {
	hosts := func(slots ...int) []Host {
		out := make([]Host, len(slots))
		for i, s := range slots {
			out[i] = Host{Name: fmt.Sprintf("gpu%02d", i+1), Slots: s}
		}
		return out
	}
	tests := []struct {
		name string
		env  map[string]string
		want []Host
	}{
		{"not in slurm", nil, nil},
		{"unrelated vars only", map[string]string{"SLURM_GPUS_ON_NODE": "8"}, nil},
		{"nodelist only", map[string]string{"SLURM_JOB_NODELIST": "gpu[01-02]"}, hosts(0, 0)},
		{"old name", map[string]string{"SLURM_NODELIST": "gpu[01-02]"}, hosts(0, 0)},
		{"job nodelist wins", map[string]string{"SLURM_JOB_NODELIST": "gpu01", "SLURM_NODELIST": "gpu[01-02]"}, hosts(0)},
		{"gpus on node", map[string]string{"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_GPUS_ON_NODE": "8", "SLURM_GPUS_PER_NODE": "4", "SLURM_NTASKS_PER_NODE": "1"}, hosts(8, 8)},
		{"gpus per node", map[string]string{"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_GPUS_PER_NODE": "4", "SLURM_NTASKS_PER_NODE": "1"}, hosts(4, 4)},
		{"gpus per node typed", map[string]string{"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_GPUS_PER_NODE": "h100:4"}, hosts(4, 4)},
		{"gpus per node types summed", map[string]string{"SLURM_JOB_NODELIST": "gpu01", "SLURM_GPUS_PER_NODE": "a100:2,h100:4"}, hosts(6)},
		{"gpus on node zero falls through", map[string]string{"SLURM_JOB_NODELIST": "gpu01", "SLURM_GPUS_ON_NODE": "0", "SLURM_NTASKS_PER_NODE": "2"}, hosts(2)},
		{"ntasks per node", map[string]string{"SLURM_JOB_NODELIST": "gpu[01-03]", "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "1(x3)"}, hosts(2, 2, 2)},
		{"tasks per node compressed", map[string]string{"SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_TASKS_PER_NODE": "2(x3),1"}, byDefault(hosts(2, 2, 2, 1))},
		{"tasks per node plain", map[string]string{"SLURM_JOB_NODELIST": "gpu[01-03]", "SLURM_TASKS_PER_NODE": "4,2,1"}, byDefault(hosts(4, 2, 1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromSlurm(env(tt.env))
			if err != nil {
				t.Fatalf("FromSlurm: %v", err)
			}
			if !reflect.DeepEqual(withoutImplied(got), withoutImplied(tt.want)) {
				t.Errorf("FromSlurm = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFromSlurmErrors(t *testing.T) {
	nodes := map[string]string{"SLURM_JOB_NODELIST": "n[1-4]"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range nodes {
			m[a] = b
		}
		return m
	}
	tests := []struct {
		name  string
		env   map[string]string
		where string
		words []string
	}{
		{"bad nodelist", map[string]string{"SLURM_JOB_NODELIST": "n[1-"}, "SLURM_JOB_NODELIST (col 2)", nil},
		{"bad old nodelist", map[string]string{"SLURM_NODELIST": "n[4-2]"}, "SLURM_NODELIST (col 3)", nil},
		{"no names", map[string]string{"SLURM_JOB_NODELIST": ",,"}, "SLURM_JOB_NODELIST", []string{"names no host"}},
		{"duplicate node", map[string]string{"SLURM_JOB_NODELIST": "n[1-2],n2"}, "SLURM_JOB_NODELIST (col 8)", []string{`duplicate host "n2" (first from the item at col 1)`}},
		{"duplicate node, other spelling", map[string]string{"SLURM_JOB_NODELIST": "node1,x,NODE1"}, "SLURM_JOB_NODELIST (col 9)", []string{`"NODE1" (the same host as "node1" from the item at col 1)`}},
		{"localhost and 127.0.0.1", map[string]string{"SLURM_JOB_NODELIST": "localhost,127.0.0.1"}, "SLURM_JOB_NODELIST (col 11)", []string{`"127.0.0.1": it and "localhost"`, "this machine"}},
		{"all-digit name", map[string]string{"SLURM_JOB_NODELIST": "n1,[1-3]"}, "SLURM_JOB_NODELIST (col 4)", []string{`host name "1"`, "all digits"}},
		{"empty label", map[string]string{"SLURM_JOB_NODELIST": "a..b[1-2]"}, "SLURM_JOB_NODELIST (col 1)", []string{`"a..b1"`, "empty label"}},
		{"label over 63", map[string]string{"SLURM_JOB_NODELIST": strings.Repeat("x", 64)}, "SLURM_JOB_NODELIST (col 1)", []string{"label of 64 characters"}},
		{"label ends with a hyphen", map[string]string{"SLURM_JOB_NODELIST": "n1,rack-"}, "SLURM_JOB_NODELIST (col 4)", []string{`label "rack-"`}},
		{"trailing dot", map[string]string{"SLURM_JOB_NODELIST": "n1."}, "SLURM_JOB_NODELIST (col 1)", []string{"ends with '.'"}},
		{"not UTF-8", map[string]string{"SLURM_JOB_NODELIST": "n1,n\xe92"}, "SLURM_JOB_NODELIST (col 5)", []string{"byte 0xe9, which is not UTF-8,"}},
		{"non-ASCII letter", map[string]string{"SLURM_JOB_NODELIST": "nœud1"}, "SLURM_JOB_NODELIST (col 2)", []string{"invalid character 'œ'"}},
		{"gpus on node", with("SLURM_GPUS_ON_NODE", "eight"), "SLURM_GPUS_ON_NODE", []string{"not a number"}},
		{"gpus per node", with("SLURM_GPUS_PER_NODE", "h100:"), "SLURM_GPUS_PER_NODE", []string{`"h100:"`}},
		{"gpus per node junk", with("SLURM_GPUS_PER_NODE", "gpu:x"), "SLURM_GPUS_PER_NODE", nil},
		{"ntasks per node", with("SLURM_NTASKS_PER_NODE", "0"), "SLURM_NTASKS_PER_NODE", []string{"0"}},
		{"tasks count mismatch", with("SLURM_TASKS_PER_NODE", "2(x3)"), "SLURM_TASKS_PER_NODE", []string{"3 counts for 4 nodes"}},
		{"tasks bad repeat", with("SLURM_TASKS_PER_NODE", "2(x)"), "SLURM_TASKS_PER_NODE", []string{"repeat"}},
		{"tasks bad form", with("SLURM_TASKS_PER_NODE", "2(3)"), "SLURM_TASKS_PER_NODE", []string{"N(xR)"}},
		{"tasks unclosed", with("SLURM_TASKS_PER_NODE", "2(x4"), "SLURM_TASKS_PER_NODE", nil},
		{"tasks empty item", with("SLURM_TASKS_PER_NODE", "2,,2"), "SLURM_TASKS_PER_NODE", nil},
		{"tasks huge repeat", with("SLURM_TASKS_PER_NODE", "1(x65536),1"), "SLURM_TASKS_PER_NODE", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromSlurm(env(tt.env))
			if err == nil {
				t.Fatalf("FromSlurm = %+v, want error", got)
			}
			wantInputError(t, err, tt.where, tt.words...)
		})
	}
}

func TestExpandTasksPerNode(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"8", []int{8}},
		{"2(x3),1", []int{2, 2, 2, 1}},
		{"1,2(x2),3(x1)", []int{1, 2, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := expandTasksPerNode(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("expandTasksPerNode(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func BenchmarkExpandSlurmHostlist(b *testing.B) {
	for b.Loop() {
		names, err := ExpandSlurmHostlist("n[0001-4096]")
		if err != nil || len(names) != 4096 {
			b.Fatal(err, len(names))
		}
	}
}

func FuzzExpandSlurmHostlist(f *testing.F) {
	for _, s := range []string{
		"node[1-3,5]", "n[001-010]", "rack[1-2]-n[01-02]", "a1,b[2-3]", "n[3-1]", "n[1-3",
		"n[1,[2]]", "n[]", "a,,b", "n[0-65535]", "x[1-2][3-4]", "[1-3]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		names, err := ExpandSlurmHostlist(expr)
		if err != nil {
			var ie *userr.InputError
			if !errors.As(err, &ie) || !strings.HasPrefix(ie.Where, "SLURM_JOB_NODELIST") {
				t.Fatalf("ExpandSlurmHostlist(%q): error %v is not a located userr.InputError", expr, err)
			}
			return
		}
		if len(names) > maxHostlist {
			t.Fatalf("ExpandSlurmHostlist(%q) = %d names", expr, len(names))
		}
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, "[], \t") || n[0] == '-' {
				t.Fatalf("ExpandSlurmHostlist(%q): bad name %q", expr, n)
			}
		}
		// Compress inverts the expansion, whatever it was.
		if back, err := ExpandSlurmHostlist(Compress(names)); err != nil || !reflect.DeepEqual(back, names) {
			t.Fatalf("ExpandSlurmHostlist(Compress(%q)) = %q, %v", names, back, err)
		}
		// A plain list (no brackets) expands to its own items.
		if !strings.ContainsAny(expr, "[]") {
			want := strings.FieldsFunc(expr, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
			if len(want) == 0 {
				want = nil
			}
			if !reflect.DeepEqual(names, want) {
				t.Fatalf("ExpandSlurmHostlist(%q) = %q, want %q", expr, names, want)
			}
		}
	})
}

func TestSlurmStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"srun task", map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, true},
		{"later step", map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "12"}, true},
		{"batch script", map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "4294967291"}, false},
		{"extern step", map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "4294967292"}, false},
		{"interactive step", map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "4294967290"}, false},
		{"salloc shell", map[string]string{"SLURM_JOB_ID": "7"}, false},
		{"no job", map[string]string{"SLURM_STEP_ID": "0"}, false},
		{"garbage", map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SlurmStep(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("SlurmStep = %v, want %v", got, tc.want)
			}
		})
	}
	// A task of `srun gorun`: its node alone, not the allocation.
	env := map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "node[0-2]"}
	hosts, err := Resolve("", "", nil, "", "", func(k string) string { return env[k] })
	if err != nil || hosts != nil {
		t.Errorf("Resolve in a step = %v, %v; want local mode", hosts, err)
	}
}

// byDefault marks hosts whose slots came from SLURM_TASKS_PER_NODE alone.
func byDefault(hosts []Host) []Host { return hosts }

// withoutImplied is hosts with Implied cleared: the tables compare what
// was read; TestImpliedSlots, where it came from.
func withoutImplied(hosts []Host) []Host {
	out := slices.Clone(hosts)
	for i := range out {
		out[i].Implied = false
	}
	return out
}

// TestImpliedSlots: slot counts from a hostfile or the Slurm allocation
// are implied (an explicit --nproc-per-node wins over them); those of
// --hosts are the command line's own.
func TestImpliedSlots(t *testing.T) {
	hf, err := ParseHostfile("hf", []byte("a slots=4\nb\n"))
	if err != nil || !hf[0].Implied || hf[1].Implied {
		t.Errorf("hostfile: %+v, %v; want a implied, b (no count) not", hf, err)
	}
	sl, err := FromSlurm(env(map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_GPUS_ON_NODE": "8"}))
	if err != nil || !sl[0].Implied || !sl[1].Implied {
		t.Errorf("Slurm: %+v, %v; want implied", sl, err)
	}
	fl, err := Parse("a:4,b:4")
	if err != nil || fl[0].Implied {
		t.Errorf("--hosts: %+v, %v; want the command line's own", fl, err)
	}
}
