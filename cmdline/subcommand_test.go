package cmdline

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/userr"
)

// The subcommands as main is meant to declare them.
var (
	hostsCommand = Subcommand{Name: "hosts", Options: []SubOption{
		{Name: "--hosts"}, {Name: "--hostfile"}, {Name: "--include"}, {Name: "--exclude"}, {Name: "--json", Flag: true},
	}}
	preflightCommand = Subcommand{Name: "preflight", Launch: true, Options: []SubOption{
		{Name: "--json", Flag: true}, {Name: "--bandwidth", Choices: []string{"node", "all"}}, {Name: "--topo-file"},
	}}
)

func TestParseSubcommand(t *testing.T) {
	type want = map[string]string
	tests := []struct {
		name   string
		cmd    Subcommand
		argv   []string
		values want
		rest   []string
	}{
		{"hosts: nothing", hostsCommand, nil, want{}, nil},
		{"hosts: space and =", hostsCommand, []string{"--hosts", "a:8,b:8", "--json", "--exclude=b"}, want{"--hosts": "a:8,b:8", "--json": "true", "--exclude": "b"}, nil},
		{"hosts: prefixes", hostsCommand, []string{"--hostf", "hf", "--js", "--inc", "a:0"}, want{"--hostfile": "hf", "--json": "true", "--include": "a:0"}, nil},
		{"hosts: the last one wins", hostsCommand, []string{"--hosts", "a", "--hosts=b"}, want{"--hosts": "b"}, nil},
		{"hosts: a value that starts with '-'", hostsCommand, []string{"--include=-x"}, want{"--include": "-x"}, nil},
		{"hosts: arguments are returned", hostsCommand, []string{"--json", "extra", "--hosts", "a"}, want{"--json": "true"}, []string{"extra", "--hosts", "a"}},
		{"hosts: -- ends the options", hostsCommand, []string{"--", "--json"}, want{}, []string{"--json"}},
		{"hosts: a negative number is an argument", hostsCommand, []string{"-1"}, want{}, []string{"-1"}},

		{"preflight: own options, then the launch line", preflightCommand,
			[]string{"--json", "--bandwidth", "node", "--hosts", "a:8", "--nproc_per_node=8", "train.py", "--lr", "1"},
			want{"--json": "true", "--bandwidth": "node"}, []string{"--hosts", "a:8", "--nproc_per_node=8", "train.py", "--lr", "1"}},
		{"preflight: own options anywhere among launch options", preflightCommand,
			[]string{"--nnodes", "2", "--bandwidth=all", "-mr3", "--json", "pkg.train"},
			want{"--json": "true", "--bandwidth": "all"}, []string{"--nnodes", "2", "-mr3", "pkg.train"}},
		{"preflight: both spellings", preflightCommand, []string{"--topo_file=t"}, want{"--topo-file": "t"}, nil},
		{"preflight: prefixes", preflightCommand, []string{"--topo-f", "t", "--j", "--b", "node"}, want{"--topo-file": "t", "--json": "true", "--bandwidth": "node"}, nil},
		{"preflight: no script", preflightCommand, []string{"--hosts", "a"}, want{}, []string{"--hosts", "a"}},
		{"preflight: options after the script are the script's", preflightCommand, []string{"train.py", "--json"}, want{}, []string{"train.py", "--json"}},
		{"preflight: -- is kept for Parse", preflightCommand, []string{"--json", "--", "--bandwidth", "node"}, want{"--json": "true"}, []string{"--", "--bandwidth", "node"}},
		{"preflight: launch values are Parse's to check", preflightCommand, []string{"--nnodes", "x", "t.py"}, want{}, []string{"--nnodes", "x", "t.py"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values, rest, err := ParseSubcommand(tt.argv, tt.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(values, tt.values) {
				t.Errorf("values = %q, want %q", values, tt.values)
			}
			if !slices.Equal(rest, tt.rest) {
				t.Errorf("rest = %q, want %q", rest, tt.rest)
			}
		})
	}
}

func TestParseSubcommandRefuses(t *testing.T) {
	tests := []struct {
		name    string
		cmd     Subcommand
		argv    []string
		where   string // "": ErrHelp expected
		problem string
		fix     string
	}{
		{"-h", hostsCommand, []string{"-h"}, "", "", ""},
		{"--help", hostsCommand, []string{"--json", "--help"}, "", "", ""},
		{"a prefix of --help", hostsCommand, []string{"--he"}, "", "", ""},
		{"help wins over an unknown option", hostsCommand, []string{"--bogus", "-h"}, "", "", ""},
		{"-hosts is -h and more letters, as argparse reads it", hostsCommand, []string{"-hosts", "a:1"}, "", "", ""},
		{"preflight -h after launch options", preflightCommand, []string{"--hosts", "a", "-h"}, "", "", ""},
		{"preflight -mh", preflightCommand, []string{"-mh"}, "", "", ""},

		{"unknown", hostsCommand, []string{"--bogus"}, "--bogus", "unrecognized arguments: --bogus", "it takes --hosts, --hostfile"},
		{"single-dash long option", hostsCommand, []string{"-json"}, "-json", "unrecognized arguments: -json", "did you mean --json?"},
		{"a typo", hostsCommand, []string{"--hostz", "a"}, "--hostz", "unrecognized", "did you mean --hosts?"},
		{"a launch option is not a hosts option", hostsCommand, []string{"--nnodes", "2"}, "--nnodes", "unrecognized arguments: --nnodes", "gorun hosts --help"},
		{"the value of an unknown option is not shown", hostsCommand, []string{"--envv=HF_TOKEN=s3cr3t"}, "--envv=…", "--envv=…", "gorun hosts"},
		{"several unknown", hostsCommand, []string{"--a", "--b", "--json"}, "--a", "--a --b", "gorun hosts --help explains them"},
		{"ambiguous", hostsCommand, []string{"--host", "a"}, "--host", "could match --hosts, --hostfile", "write more"},
		{"ambiguous with help", hostsCommand, []string{"--h"}, "--h", "could match --help, --hosts, --hostfile", "write more"},
		{"missing value", hostsCommand, []string{"--hosts"}, "--hosts", "expected one argument", "--hosts=VALUE"},
		{"an option is no value", hostsCommand, []string{"--hosts", "--json"}, "--hosts", "expected one argument", "--hosts VALUE"},
		{"empty value", hostsCommand, []string{"--hosts="}, "--hosts", "empty value", "leave --hosts out"},
		{"a flag takes no value", hostsCommand, []string{"--json=1"}, "--json", "takes no value", "--json alone"},

		{"preflight: a choice", preflightCommand, []string{"--bandwidth", "fast"}, "--bandwidth", `invalid choice: "fast"`, "choose from node, all"},
		{"preflight: both spellings of a prefix", preflightCommand, []string{"--topo", "t"}, "--topo", "could match --topo-file, --topo_file", "write more"},
		{"preflight: shares the launch namespace", preflightCommand, []string{"--to", "t"}, "--to", "could match --torchrun, --topo-file", "write more"},
		{"preflight: torchrun's ambiguity", preflightCommand, []string{"--nproc", "8"}, "--nproc", "--nproc-per-node, --nproc_per_node", "write more"},
		{"preflight: unknown", preflightCommand, []string{"--jsno", "train.py"}, "--jsno", "unrecognized", "did you mean --json? gorun preflight --help lists the options; they go before the training script"},
		{"preflight: far from every name", preflightCommand, []string{"--zzzzzzzz"}, "--zzzzzzzz", "unrecognized", "gorun preflight --help"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseSubcommand(tt.argv, tt.cmd)
			if tt.where == "" {
				if !errors.Is(err, ErrHelp) {
					t.Fatalf("err = %v, want ErrHelp", err)
				}
				return
			}
			var ie *userr.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v (%T), want *userr.InputError", err, err)
			}
			if ie.Where != tt.where || !strings.Contains(ie.Problem, tt.problem) || !strings.Contains(ie.Fix, tt.fix) {
				t.Errorf("err = %+v, want Where %q, Problem with %q, Fix with %q", *ie, tt.where, tt.problem, tt.fix)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the message shows a value: %v", err)
			}
		})
	}
}

// A subcommand declared wrongly is the program's fault, not the user's.
func TestParseSubcommandDeclaration(t *testing.T) {
	for _, cmd := range []Subcommand{
		{Name: "x", Options: []SubOption{{Name: "json"}}},
		{Name: "x", Options: []SubOption{{Name: "-j"}}},
		{Name: "x", Options: []SubOption{{Name: "--"}}},
		{Name: "x", Options: []SubOption{{Name: "--a=b"}}},
		{Name: "x", Options: []SubOption{{Name: "--json", Flag: true, Choices: []string{"a"}}}},
		{Name: "x", Options: []SubOption{{Name: "--json"}, {Name: "--json", Flag: true}}},
		{Name: "x", Options: []SubOption{{Name: "--a-b"}, {Name: "--a_b"}}},
		{Name: "x", Options: []SubOption{{Name: "--help"}}},
		{Name: "x", Launch: true, Options: []SubOption{{Name: "--hosts"}}},
		{Name: "x", Launch: true, Options: []SubOption{{Name: "--nproc-per-node"}}},
	} {
		_, _, err := ParseSubcommand(nil, cmd)
		var ie *userr.InputError
		if err == nil || errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "cmdline: gorun x:") {
			t.Errorf("%+v: err = %v, want a declaration error", cmd.Options, err)
		}
	}
}

// What preflight leaves is a launch command line, and Parse reads it as it
// reads gorun's own.
func TestParseSubcommandThenParse(t *testing.T) {
	argv := []string{"--bandwidth", "all", "--hosts", "a:2,b:2", "--nproc-per", "2", "--json", "train.py", "--json"}
	values, rest, err := ParseSubcommand(argv, preflightCommand)
	if err != nil {
		t.Fatal(err)
	}
	if values["--bandwidth"] != "all" || values["--json"] != "true" {
		t.Errorf("values = %q", values)
	}
	cl, err := Parse(rest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Gorun.Hosts != "a:2,b:2" || cl.Torchrun.NProcPerNode != "2" || cl.Torchrun.TrainingScript != "train.py" ||
		!slices.Equal(cl.Torchrun.TrainingScriptArgs, []string{"--json"}) {
		t.Errorf("Parse(%q) = %+v", rest, cl)
	}
}

// Whatever argv holds, ParseSubcommand returns values, ErrHelp or a whole
// *userr.InputError that prints on one safe line; with Launch, what it
// keeps is argv without the subcommand's own options, in order.
func FuzzParseSubcommand(f *testing.F) {
	for _, s := range []string{"--hosts\x00a", "--json\x00--bandwidth=node\x00x", "-hosts", "--to\x00t", "-mr3\x00--j", "--\x00--json", "--envv=\x1b[31m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		var argv []string
		if args != "" {
			argv = strings.Split(args, "\x00")
		}
		for _, cmd := range []Subcommand{hostsCommand, preflightCommand} {
			values, rest, err := ParseSubcommand(argv, cmd)
			if err != nil {
				var ie *userr.InputError
				if !errors.Is(err, ErrHelp) && (!errors.As(err, &ie) || ie.Where == "" || ie.Problem == "") {
					t.Fatalf("%q: error %v (%T) is neither ErrHelp nor a complete *userr.InputError", argv, err, err)
				}
				if msg := err.Error(); strings.ContainsFunc(msg, userr.UnsafeRune) || len(msg) > 4096 {
					t.Fatalf("%q: message %q", argv, msg)
				}
				continue
			}
			if len(rest) > len(argv) || len(values) > len(cmd.Options) {
				t.Fatalf("%q: %d values, rest %q", argv, len(values), rest)
			}
			if cmd.Launch && !isSubsequence(rest, argv) {
				t.Fatalf("%q: rest %q is not a part of argv in order", argv, rest)
			}
		}
	})
}

// isSubsequence reports whether a's strings all appear in b in order.
func isSubsequence(a, b []string) bool {
	for _, s := range b {
		if len(a) > 0 && a[0] == s {
			a = a[1:]
		}
	}
	return len(a) == 0
}
