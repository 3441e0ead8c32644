package sshexec

import (
	"fmt"
	"os"
	"strings"
)

// scriptVerdict is what a fork server read of the workers' script before
// its imports (warm.py _scan): whether a worker must start cold, and the
// file that, once a pooled worker of the same script was seen changing
// what its interpreter had imported with (warm.py _watch), says so for
// every later start.
type scriptVerdict struct {
	Target  string `json:"target"`            // the script (or module) read, as Pool.Worker[0]
	Module  bool   `json:"module,omitempty"`  //
	Cold    string `json:"cold,omitempty"`    // why its workers start cold; "": they need not
	Learned string `json:"learned,omitempty"` // the file; "": none could be named
}

// cold says why take's worker cannot run in an interpreter of this fork
// server, as far as its script tells: "" when it can.
func (v scriptVerdict) cold(take PoolTake) string {
	switch {
	case v.Target == "":
		return "" // no script was named to the pool (Pool.Worker): the environment rules alone
	case take.Target != v.Target || take.Module != v.Module:
		return fmt.Sprintf("the worker runs %s, the pool read %s", take.Target, v.Target)
	case v.Cold != "":
		return v.Cold
	}
	if v.Learned != "" {
		if b, err := os.ReadFile(v.Learned); err == nil {
			return "an earlier pooled worker of this script " + strings.TrimSpace(string(b))
		}
	}
	return ""
}
