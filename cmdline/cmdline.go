package cmdline

import (
	"errors"
	"strings"

	"github.com/gorun/gorun/internal/userr"
)

// ErrHelp is returned by Parse when the user asked for help
// (-h, --help, or an unambiguous prefix such as --he). main prints the help
// text and exits 0, as torchrun does.
var ErrHelp = errors.New("help requested")

// placeholderRdzvID is the rendezvous id ParseWith uses for
// --standalone when it is given no id source, so that tests and golden plans
// stay deterministic. It has the shape of a uuid4, like torchrun's own id.
const placeholderRdzvID = "00000000-0000-4000-8000-000000000000"

// Parse parses a gorun launch command line: everything after the
// program name, `[gorun options] [torchrun options] training_script [script
// args...]`, with torchrun 2.11's argparse rules (prefixes, both spellings,
// PET_<DEST> defaults read through getenv). A --standalone run gets a fresh
// random uuid4 as its rendezvous id, like torchrun. Errors caused by the input
// are *userr.InputError; -h/--help returns ErrHelp.
func Parse(argv []string, getenv func(string) string) (CommandLine, error) {
	return ParseWith(argv, getenv, newUUID4)
}

// ParseWith is Parse with the source of the --standalone
// rendezvous id injected. A nil newID yields the fixed placeholder
// "00000000-0000-4000-8000-000000000000"; a nil getenv means an empty
// environment.
//
// Given lists the PET_ defaults that took effect first, in torchrun's
// declaration order, then the torchrun options on argv in the order typed,
// repeats included (the last one wins). A PET_ flag that reads as false and a
// PET_ value overridden on argv are not listed; gorun's own options never are.
//
// A prefix that matches both spellings of one option (--nproc matches
// --nproc-per-node and --nproc_per_node) is ambiguous, as argparse has it
// (checked against torchrun 2.11: cmdline/testdata/torchrun_parse_diff.py).
//
// Differences from torchrun, all deliberate:
//   - arguments after the training script are never inspected (some Python
//     versions refuse an ambiguous prefix there);
//   - gorun's own options share the prefix namespace, so three prefixes that
//     picked one torchrun option now are ambiguous: --h (--help), --re
//     (--redirects) and --t (--tee);
//   - an empty PET_ variable counts as unset (getenv cannot tell them apart);
//   - values torchrun only rejects once it runs (an empty training script,
//     --nproc-per-node 0, a negative --node-rank, a --master-port outside
//     1..65535, an empty --master-addr, a --rdzv-endpoint its backend cannot
//     use, a non-finite or negative --monitor-interval, PET_START_METHOD
//     outside spawn|fork|forkserver, a privateuse1 backend name for
//     --nproc-per-node) are refused here, before anything starts; so is an
//     --env for a variable torchrun sets for every worker itself (see
//     checkEnvFlag);
//   - an error echoes at most 80 characters of any value, and never the
//     value of an --env or the part after '=' of an unknown option (a
//     mistyped --env).
func ParseWith(argv []string, getenv func(string) string, newID func() string) (CommandLine, error) {
	return parse(argv, getenv, newID, nil)
}

// ParseExtra is Parse knowing, besides torchrun 2.11's options and
// gorun's, options of a newer torchrun (read from its --help): they are
// torchrun's, passed to it as typed (CommandLine.Given).
func ParseExtra(argv []string, getenv func(string) string, extra []Extra) (CommandLine, error) {
	return parse(argv, getenv, newUUID4, extra)
}

// Extra is an option of a newer torchrun that gorun does not know.
type Extra struct {
	Names []string // its spellings, "--exit-barrier-timeout", "--exit_barrier_timeout"
	Value bool     // it takes a value
}

// UnknownOptionsError is a command line with options that neither gorun
// nor torchrun 2.11 knows. It is an input error (Unwrap); a caller may ask
// the torchrun the launch would run whether its --help lists them
// (ParseExtra).
type UnknownOptionsError struct {
	*userr.InputError
	Names    []string // each unknown option as typed, without its "=value"
	Torchrun string   // --torchrun as given (its default "torchrun")
}

func (e *UnknownOptionsError) Unwrap() error { return e.InputError }

func parse(argv []string, getenv func(string) string, newID func() string, extra []Extra) (CommandLine, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if newID == nil {
		newID = func() string { return placeholderRdzvID }
	}
	p := newParser(extra)
	if err := p.parseArgv(argv); err != nil {
		return CommandLine{}, err
	}
	if err := p.applyEnv(getenv); err != nil {
		return CommandLine{}, err
	}
	cfg, err := p.config(newID)
	if err != nil {
		return CommandLine{}, err
	}
	if err := p.checkGorun(); err != nil {
		return CommandLine{}, err
	}
	if err := p.applyShutdownTimeout(getenv); err != nil {
		return CommandLine{}, err
	}
	if err := p.checkPrewarm(cfg); err != nil {
		return CommandLine{}, err
	}
	given := append(p.envGiven, p.argvGiven...)
	if given == nil {
		given = []Arg{}
	}
	return CommandLine{Gorun: p.gorun, Torchrun: cfg, Given: given, Extra: extra}, nil
}

// TorchrunOptionNames lists the canonical (dashed) long name of every torchrun
// 2.11 launch option gorun accepts, in torchrun's --help order. -h/--help and
// the positional arguments are not included.
func TorchrunOptionNames() []string {
	var names []string
	for _, s := range optionTable() {
		if s.gorun == nil && s.kind != kindHelp {
			names = append(names, s.canonical())
		}
	}
	return names
}

// GorunOptionNames lists gorun's own options, which share torchrun's
// namespace on the command line but never reach torchrun.
func GorunOptionNames() []string {
	var names []string
	for _, s := range optionTable() {
		if s.gorun != nil {
			names = append(names, s.canonical())
		}
	}
	return names
}

// parser reads one launch command line: its table holds torchrun's
// options and gorun's own, and it gathers what argv and the PET_ variables
// set.
type parser struct {
	table

	set       map[string]setting // torchrun dest -> value given on argv or PET_
	argvSet   map[string]bool
	argvGiven []Arg
	envGiven  []Arg
	unknown   []string

	script     string
	scriptArgs []string
	haveScript bool

	gorun      Options
	gorunGiven map[string]string // dest of each gorun option on argv -> the spelling typed last
}

func newParser(extra []Extra) *parser {
	specs := optionTable()
	for _, e := range extra {
		kind := kindFlag
		if e.Value {
			kind = kindValue
		}
		dest := strings.ReplaceAll(strings.TrimPrefix(e.Names[0], "--"), "-", "_")
		specs = append(specs, &optionSpec{names: e.Names, dest: dest, kind: kind})
	}
	p := &parser{
		table:      newTable(specs),
		set:        map[string]setting{},
		argvSet:    map[string]bool{},
		gorunGiven: map[string]string{},
	}
	p.gorun = gorunDefaults(p.specs)
	return p
}

// parseArgv walks argv once, as argparse does for this parser: options until
// the first argument or "--", then the script and, untouched, its arguments.
func (p *parser) parseArgv(argv []string) error {
	for i := 0; i < len(argv); i++ {
		tok := argv[i]
		if tok == "--" {
			if i+1 < len(argv) {
				p.setScript(argv[i+1], argv[i+2:])
			}
			break
		}
		m, kind := p.classify(tok)
		switch kind {
		case tokArg:
			rest := argv[i+1:]
			// argparse lets the script positional swallow the "--" that
			// ends the options when it comes right after the script.
			if len(rest) > 0 && rest[0] == "--" {
				rest = rest[1:]
			}
			p.setScript(tok, rest)
			return p.finishArgv()
		case tokAmbiguous:
			return ambiguousError(m)
		case tokUnknown:
			p.unknown = append(p.unknown, tok)
			continue
		}
		next, err := p.consume(m, argv, i, p.apply, &p.unknown)
		if err != nil {
			return err
		}
		i = next
	}
	return p.finishArgv()
}

func (p *parser) setScript(script string, args []string) {
	p.script = script
	p.scriptArgs = append([]string{}, args...)
	p.haveScript = true
}

func (p *parser) finishArgv() error {
	if !p.haveScript {
		return &userr.InputError{
			Where:   "training_script",
			Problem: "the training script is missing",
			Fix:     "put it after the options: gorun [options] train.py [script args]",
		}
	}
	if p.script == "" {
		return &userr.InputError{Where: "training_script", Problem: "the training script is an empty string", Fix: "name the script or module to run"}
	}
	if len(p.unknown) > 0 {
		names := make([]string, len(p.unknown))
		for i, u := range p.unknown {
			names[i], _, _ = strings.Cut(u, "=")
		}
		ie := unrecognized(p.unknown, "see gorun --help; options go before the training script, its own arguments after it").(*userr.InputError)
		return &UnknownOptionsError{InputError: ie, Names: names, Torchrun: p.gorun.Torchrun}
	}
	return nil
}

// apply records one option from argv: typed checks first, as argparse does
// while it reads the value; a repeated option replaces the earlier value.
func (p *parser) apply(s *optionSpec, typed, value string, argi int) error {
	if s.gorun != nil {
		return p.applyGorun(s, typed, value, argi)
	}
	if s.kind == kindFlag {
		value = "1"
	} else if err := checkType(s, typed, value); err != nil {
		return err
	}
	p.set[s.dest] = setting{value: value, where: typed}
	p.argvSet[s.dest] = true
	a := Arg{Name: s.canonical(), Dest: s.dest, Value: value, IsFlag: s.kind == kindFlag}
	if a.IsFlag {
		a.Value = ""
	}
	p.argvGiven = append(p.argvGiven, a)
	return nil
}

// get returns the effective value of a torchrun option, or its default.
func (p *parser) get(dest, def string) setting {
	if s, ok := p.set[dest]; ok {
		return s
	}
	return setting{value: def, where: "--" + strings.ReplaceAll(dest, "_", "-")}
}

func (p *parser) flag(dest string) bool { _, ok := p.set[dest]; return ok }
