package cmdline

import (
	"fmt"

	"github.com/gorun/gorun/internal/userr"
)

// applyEnv supplies PET_<DEST> defaults for options not set on argv. A flag's
// variable is read as check_env does, bool(int(value)), whether or not the
// flag is also on argv (torchrun reads it when it builds its parser).
func (p *parser) applyEnv(getenv func(string) string) error {
	for _, s := range p.specs {
		if s.gorun != nil || !s.env {
			continue
		}
		name := s.envName()
		raw := getenv(name)
		if raw == "" {
			continue
		}
		if s.kind == kindFlag {
			n, ok := pyInt(raw)
			if !ok {
				return &userr.InputError{
					Where:   name,
					Problem: fmt.Sprintf("%s is not an integer (torchrun reads it as bool(int(value)))", userr.Quote(raw)),
					Fix:     fmt.Sprintf("set %s=1 to turn %s on, 0 or unset to leave it off", name, s.canonical()),
				}
			}
			if n == 0 || p.argvSet[s.dest] {
				continue
			}
			p.set[s.dest] = setting{value: "1", where: name}
			p.envGiven = append(p.envGiven, Arg{Name: s.canonical(), Dest: s.dest, IsFlag: true, FromEnv: true})
			continue
		}
		if p.argvSet[s.dest] {
			continue
		}
		if err := checkType(s, name, raw); err != nil {
			return err
		}
		p.set[s.dest] = setting{value: raw, where: name}
		p.envGiven = append(p.envGiven, Arg{Name: s.canonical(), Dest: s.dest, Value: raw, FromEnv: true})
	}
	return nil
}
