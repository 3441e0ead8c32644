package cmdline

import (
	"fmt"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
	"github.com/gorun/gorun/internal/userr"
)

// optKind says how an option takes its value.
type optKind int

const (
	kindValue optKind = iota // --opt VALUE or --opt=VALUE
	kindFlag                 // store_true (torchrun: check_env)
	kindHelp                 // -h, --help
)

// valueType is the argparse type= of a torchrun option: the check argparse
// applies as soon as it reads the value.
type valueType int

const (
	typeStr valueType = iota
	typeInt
	typeFloat
)

// optionSpec is one option as argparse declares it.
type optionSpec struct {
	names   []string // canonical dashed long name first, then aliases, short last
	dest    string   // argparse dest (torchrun), a key (gorun's and subcommands' options)
	kind    optKind
	typ     valueType
	choices []string
	env     bool       // PET_<DEST> supplies the default (torchrun env/check_env)
	gorun   *gorunRule // how one of gorun's own options is stored; nil for torchrun's
}

func (s *optionSpec) canonical() string { return s.names[0] }

func (s *optionSpec) envName() string { return "PET_" + strings.ToUpper(s.dest) }

// table is one parser's options, indexed for argparse's lookups.
type table struct {
	specs  []*optionSpec
	byName map[string]*optionSpec
	names  []string // every option string, in declaration order
}

func newTable(specs []*optionSpec) table {
	t := table{specs: specs, byName: map[string]*optionSpec{}}
	for _, s := range specs {
		for _, n := range s.names {
			t.byName[n] = s
			t.names = append(t.names, n)
		}
	}
	return t
}

// applyFunc records one option read from argv: spec s as typed ("--nnod",
// "-r"), with its value ("" for a flag). argi is the index in argv of the
// option's own string, for messages.
type applyFunc func(s *optionSpec, typed, value string, argi int) error

// tokenKind is argparse's classification of one argv string: 'A' (an
// argument) or 'O' (an option, known, ambiguous or unknown).
type tokenKind int

const (
	tokArg tokenKind = iota
	tokOption
	tokAmbiguous
	tokUnknown
)

// match is an option string resolved to its option, with any value attached
// to it ("--nnodes=2", "-r3").
type match struct {
	spec        *optionSpec
	typed       string // the option part as typed: "--nnod", "-r"
	explicit    string
	hasExplicit bool
	sep         bool // the explicit value followed '='
	candidates  []*optionSpec
	names       []string // the option strings an ambiguous prefix matched
}

// argparse treats these as arguments, not options, when no option looks like
// a negative number (torchrun has none).
var negativeNumber = lazyre.New(`^-(?:\d+|\d*\.\d+)\n?$`)

// classify follows argparse's _parse_optional and _get_option_tuples, except
// that candidates are counted per option, not per spelling.
func (t *table) classify(tok string) (match, tokenKind) {
	if tok == "" || tok[0] != '-' {
		return match{}, tokArg
	}
	if s, ok := t.byName[tok]; ok {
		return match{spec: s, typed: tok}, tokOption
	}
	if len(tok) == 1 {
		return match{}, tokArg
	}
	// An exact option name before '=' always wins over prefix matches.
	if name, val, ok := strings.Cut(tok, "="); ok {
		if s, ok := t.byName[name]; ok {
			return match{spec: s, typed: name, explicit: val, hasExplicit: true, sep: true}, tokOption
		}
	}
	var found []match
	add := func(m match) {
		for _, f := range found {
			if f.spec == m.spec {
				return
			}
		}
		found = append(found, m)
	}
	prefix, val, hasEq := strings.Cut(tok, "=")
	var matched []string
	if strings.HasPrefix(tok, "--") {
		for _, n := range t.names {
			if strings.HasPrefix(n, prefix) {
				matched = append(matched, n)
				add(match{spec: t.byName[n], typed: prefix, explicit: val, hasExplicit: hasEq, sep: hasEq})
			}
		}
		// As argparse: a prefix of two spellings of one option
		// (--nproc: --nproc-per-node, --nproc_per_node) is ambiguous too.
		if len(found) == 1 && len(matched) > 1 {
			return match{typed: prefix, names: matched}, tokAmbiguous
		}
	} else {
		// A short option may carry its value: -r3.
		short := tok[:2]
		for _, n := range t.names {
			if n == short {
				add(match{spec: t.byName[n], typed: short, explicit: tok[2:], hasExplicit: true})
			} else if strings.HasPrefix(n, prefix) {
				add(match{spec: t.byName[n], typed: prefix, explicit: val, hasExplicit: hasEq, sep: hasEq})
			}
		}
	}
	switch {
	case len(found) == 1:
		return found[0], tokOption
	case len(found) > 1:
		m := match{typed: prefix}
		for _, f := range found {
			m.candidates = append(m.candidates, f.spec)
		}
		return m, tokAmbiguous
	case negativeNumber().MatchString(tok), strings.Contains(tok, " "):
		return match{}, tokArg
	}
	return match{typed: tok}, tokUnknown
}

// consume applies the option matched at argv[i] (and, for a value option
// without an attached value, argv[i+1]) and returns the index of the last
// argv string it used. Short flags chain as argparse allows: -mr3 is -m -r 3;
// a chain that goes on with letters naming no option is added to *unknown.
func (t *table) consume(m match, argv []string, i int, apply applyFunc, unknown *[]string) (int, error) {
	argi := i
	help := false
	for {
		switch m.spec.kind {
		case kindFlag, kindHelp:
			if m.hasExplicit {
				long := len(m.typed) > 1 && m.typed[1] == '-'
				if long || m.sep || m.explicit == "" || m.explicit[0] == '-' {
					return i, &userr.InputError{
						Where:   m.typed,
						Problem: fmt.Sprintf("takes no value (ignored explicit argument %s)", userr.Quote(m.explicit)),
						Fix:     "write " + m.typed + " alone",
					}
				}
			}
			if m.spec.kind == kindHelp {
				help = true
			} else if err := apply(m.spec, m.typed, "", argi); err != nil {
				return i, err
			}
			if !m.hasExplicit {
				if help {
					return i, ErrHelp
				}
				return i, nil
			}
			// -mXYZ: the rest names more short options.
			next := "-" + m.explicit[:1]
			s, ok := t.byName[next]
			if !ok {
				*unknown = append(*unknown, "-"+m.explicit)
				if help {
					return i, ErrHelp
				}
				return i, nil
			}
			rest := m.explicit[1:]
			m = match{spec: s, typed: next, explicit: rest, hasExplicit: rest != ""}
			if strings.HasPrefix(rest, "=") {
				m.explicit, m.sep = rest[1:], true
			}
		case kindValue:
			if help {
				// argparse has already collected -h; it runs first and exits.
				return i, ErrHelp
			}
			value := m.explicit
			if !m.hasExplicit {
				if i+1 >= len(argv) || argv[i+1] == "--" {
					return i, missingValue(m.typed)
				}
				if _, kind := t.classify(argv[i+1]); kind != tokArg {
					return i, missingValue(m.typed)
				}
				i++
				value = argv[i]
			}
			return i, apply(m.spec, m.typed, value, argi)
		}
	}
}

func missingValue(typed string) error {
	return &userr.InputError{
		Where:   typed,
		Problem: "expected one argument",
		Fix:     fmt.Sprintf("write %s VALUE, or %s=VALUE when the value starts with '-'", typed, typed),
	}
}

func ambiguousError(m match) error {
	names := m.names
	if names == nil {
		for _, s := range m.candidates {
			names = append(names, s.canonical())
		}
	}
	return &userr.InputError{
		Where:   m.typed,
		Problem: "ambiguous option: could match " + strings.Join(names, ", "),
		Fix:     "write more of the option's name",
	}
}

// unrecognized refuses the options in unknown, as argparse's
// "unrecognized arguments" does: the first is Where, up to five are listed.
func unrecognized(unknown []string, fix string) error {
	const listed = 5
	shown := make([]string, 0, listed+1)
	for _, u := range unknown[:min(len(unknown), listed)] {
		shown = append(shown, unknownOption(u))
	}
	if len(unknown) > listed {
		shown = append(shown, fmt.Sprintf("and %d more", len(unknown)-listed))
	}
	return &userr.InputError{
		Where:   unknownOption(unknown[0]),
		Problem: "unrecognized arguments: " + strings.Join(shown, " "),
		Fix:     fix,
	}
}

// unknownOption shows an unrecognized option in an error: the part after
// '=' is left out, since the option may be a mistyped --env with a secret
// as its value, and the rest is cut to userr.MaxEcho runes.
func unknownOption(tok string) string {
	if name, _, ok := strings.Cut(tok, "="); ok {
		return userr.Echo(name) + "=…"
	}
	return userr.Echo(tok)
}

func checkType(s *optionSpec, where, value string) error {
	switch s.typ {
	case typeInt:
		if _, ok := pyInt(value); !ok {
			return &userr.InputError{Where: where, Problem: fmt.Sprintf("invalid int value: %s", userr.Quote(value)), Fix: "give a whole number"}
		}
	case typeFloat:
		if _, ok := pyFloat(value); !ok {
			return &userr.InputError{Where: where, Problem: fmt.Sprintf("invalid float value: %s", userr.Quote(value)), Fix: "give a number of seconds, e.g. 0.5"}
		}
	}
	if s.choices != nil && !contains(s.choices, value) {
		return &userr.InputError{
			Where:   where,
			Problem: fmt.Sprintf("invalid choice: %s", userr.Quote(value)),
			Fix:     "choose from " + strings.Join(s.choices, ", "),
		}
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
