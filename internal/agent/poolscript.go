package agent

import (
	"fmt"
	"os"
	"strings"

	"github.com/gorun/gorun/internal/wire"
)

// scriptVerdict is what a fork server read of the workers' script before
// its imports (warm.py _scan): whether a worker must start cold, and the
// file that, once a pooled worker of the same script was seen changing
// what its interpreter had imported with (warm.py _watch), says so for
// every later start.
type scriptVerdict struct {
	Target  string `json:"target"`            // the script (or module) read, as wire.Pool.Worker[0]
	Module  bool   `json:"module,omitempty"`  //
	Cold    string `json:"cold,omitempty"`    // why its workers start cold; "": they need not
	Learned string `json:"learned,omitempty"` // the file; "": none could be named
}

// cold says why take's worker cannot run in an interpreter of this fork
// server, as far as its script tells: "" when it can. learned reads the
// file that says what an earlier pooled worker changed.
func (v scriptVerdict) cold(take wire.PoolTake, learned func(path string) string) string {
	switch {
	case v.Target == "":
		return "" // no script was named to the pool (wire.Pool.Worker): the environment rules alone
	case take.Target != v.Target || take.Module != v.Module:
		return fmt.Sprintf("the worker runs %s, the pool read %s", take.Target, v.Target)
	case v.Cold != "":
		return v.Cold
	}
	if v.Learned != "" {
		if said := learned(v.Learned); said != "" {
			return "an earlier pooled worker of this script " + said
		}
	}
	return ""
}

// learnedOnce reads path at its first call and gives that text to every
// later one: all workers of one pool (one attempt) start the same way,
// however far a first pooled rank got before a later rank's take came.
func (p *pool) learnedOnce(path string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if said, ok := p.learned[path]; ok {
		return said
	}
	said := ""
	if b, err := os.ReadFile(path); err == nil {
		said = strings.TrimSpace(string(b))
	}
	if p.learned == nil {
		p.learned = map[string]string{}
	}
	p.learned[path] = said
	return said
}
