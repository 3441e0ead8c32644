package cmdline

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gorun/gorun/internal/userr"
)

// SubOption declares one option of a gorun subcommand.
type SubOption struct {
	// Name is the option's long name with its two dashes: "--topo-file".
	// When it has a '-' after them, the '_' spelling is accepted too
	// (--topo_file), as for torchrun's options.
	Name string
	// Flag marks an option that takes no value (--json). Any other takes
	// exactly one, never empty: --name VALUE or --name=VALUE.
	Flag bool
	// Choices, when not nil, are the only values accepted.
	Choices []string
	// Fix, when set, is what a missing, empty or refused value's error
	// says to do ("--topo-file FILE, the saved output of nvidia-smi topo -m").
	Fix string
}

// Subcommand declares the command line of `gorun <Name>`.
type Subcommand struct {
	Name    string // "hosts": messages say `gorun hosts --help`
	Options []SubOption
	// Launch admits the launch command line after the subcommand's own
	// options: gorun's and torchrun's options, the training script and its
	// arguments (`gorun preflight`). All options share one prefix
	// namespace, so --t is ambiguous between --tee and a --topo-file.
	Launch bool
}

// ParseSubcommand reads the options of a gorun subcommand with the grammar
// of the launch command line (Parse): options come first and end at the
// first argument that is not one, or at "--"; a long option may be
// shortened to any prefix that names one option alone; a value follows as
// --name VALUE or --name=VALUE; -h, --help or a prefix of --help returns
// ErrHelp, even after an error that is only found later. A single-dash
// long option is read as argparse reads it: -json is unknown, and -hosts is
// -h followed by other letters, which asks for help.
//
// values maps the Name of each option given to its value, the last one
// when it is repeated; a flag maps to "true". Without Launch, rest holds
// the arguments after the options (after "--", when it ends them), for the
// caller to refuse or use. With Launch, rest is argv without the
// subcommand's own options: the launch options as typed, in order, then
// the script and its arguments untouched, ready for Parse, which checks
// their values; launch options are only recognised here.
//
// An unknown or ambiguous option, a missing or empty value and a value
// outside Choices are *userr.InputError values with a fix; an unknown
// option's fix names the closest option when one is near. A Subcommand
// whose declaration is wrong (a Name without "--", a name given twice, one
// of the launch options' names under Launch) returns a plain error.
func ParseSubcommand(argv []string, cmd Subcommand) (values map[string]string, rest []string, err error) {
	own, err := subSpecs(cmd)
	if err != nil {
		return nil, nil, err
	}
	var specs []*optionSpec
	if cmd.Launch {
		specs = optionTable() // it holds -h/--help
	} else {
		specs = []*optionSpec{{names: []string{"--help", "-h"}, dest: "help", kind: kindHelp}}
	}
	t := newTable(append(specs, own...))
	if err := duplicateName(cmd, t); err != nil {
		return nil, nil, err
	}
	mine := make(map[*optionSpec]bool, len(own))
	for _, s := range own {
		mine[s] = true
	}
	values = map[string]string{}
	apply := func(s *optionSpec, typed, value string, _ int) error {
		switch {
		case !mine[s]: // a launch option: Parse reads it
		case s.kind == kindFlag:
			values[s.dest] = "true"
		case value == "":
			return &userr.InputError{Where: typed, Problem: "empty value", Fix: "give a value or leave " + s.canonical() + " out"}
		default:
			if err := checkType(s, typed, value); err != nil {
				return err
			}
			values[s.dest] = value
		}
		return nil
	}

	var unknown []string
	i := 0
walk:
	for ; i < len(argv); i++ {
		if argv[i] == "--" {
			break
		}
		m, kind := t.classify(argv[i])
		switch kind {
		case tokArg:
			break walk
		case tokAmbiguous:
			return nil, nil, ambiguousError(m)
		case tokUnknown:
			unknown = append(unknown, argv[i])
			continue
		}
		next, err := t.consume(m, argv, i, apply, &unknown)
		if err != nil {
			return nil, nil, optionFix(err, cmd, m.spec)
		}
		if !mine[m.spec] {
			rest = append(rest, argv[i:next+1]...)
		}
		i = next
	}
	if len(unknown) > 0 {
		return nil, nil, unrecognized(unknown, unknownFix(cmd, t, unknown[0]))
	}
	switch {
	case i == len(argv):
	case cmd.Launch:
		rest = append(rest, argv[i:]...) // Parse reads "--" itself
	case argv[i] == "--":
		rest = append(rest, argv[i+1:]...)
	default:
		rest = append(rest, argv[i:]...)
	}
	return values, rest, nil
}

// subSpecs turns a subcommand's declared options into table rows whose
// dest is the declared Name.
func subSpecs(cmd Subcommand) ([]*optionSpec, error) {
	specs := make([]*optionSpec, 0, len(cmd.Options))
	for _, o := range cmd.Options {
		body, ok := strings.CutPrefix(o.Name, "--")
		if !ok || body == "" || strings.HasPrefix(body, "-") || strings.ContainsAny(body, "= \t") {
			return nil, fmt.Errorf("cmdline: gorun %s: option name %q is not --name", cmd.Name, o.Name)
		}
		if o.Flag && o.Choices != nil {
			return nil, fmt.Errorf("cmdline: gorun %s: flag %s has choices", cmd.Name, o.Name)
		}
		s := &optionSpec{names: []string{o.Name}, dest: o.Name, kind: kindValue, choices: o.Choices}
		if o.Flag {
			s.kind = kindFlag
		}
		if under := "--" + strings.ReplaceAll(body, "-", "_"); under != o.Name {
			s.names = append(s.names, under)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// duplicateName reports a name that two rows of t declare.
func duplicateName(cmd Subcommand, t table) error {
	if len(t.byName) == len(t.names) {
		return nil
	}
	seen := map[string]bool{}
	for _, n := range t.names {
		if seen[n] {
			return fmt.Errorf("cmdline: gorun %s: option %s is declared twice (or is a launch option)", cmd.Name, n)
		}
		seen[n] = true
	}
	return nil
}

// optionFix gives a value's error the fix the subcommand declared for its
// option, if any.
func optionFix(err error, cmd Subcommand, s *optionSpec) error {
	var input *userr.InputError
	if s == nil || !errors.As(err, &input) {
		return err
	}
	for _, o := range cmd.Options {
		if o.Name == s.dest && o.Fix != "" {
			input.Fix = o.Fix
		}
	}
	return err
}

// unknownFix tells where the options of cmd are listed and, when an option
// of t is within two edits of tok, suggests it.
func unknownFix(cmd Subcommand, t table, tok string) string {
	fix := "gorun " + cmd.Name + " --help lists the options"
	if !cmd.Launch {
		names := make([]string, len(cmd.Options))
		for i, o := range cmd.Options {
			names[i] = o.Name
		}
		fix = "it takes " + strings.Join(names, ", ") + "; gorun " + cmd.Name + " --help explains them"
	}
	if cmd.Launch {
		fix += "; they go before the training script, its own arguments after it"
	}
	name, _, _ := strings.Cut(tok, "=")
	if len(name) > 64 { // no option is this long; spare the quadratic distance
		return fix
	}
	best, bestDist := "", 3
	for _, s := range t.specs {
		for _, n := range s.names {
			if !strings.HasPrefix(n, "--") {
				continue
			}
			if d := userr.EditDistance(name, n); d < bestDist {
				best, bestDist = s.canonical(), d
			}
		}
	}
	if best == "" {
		return fix
	}
	return "did you mean " + best + "? " + fix
}
