// Package testenv holds the one rule for a test that needs something this
// machine may lack (chromium, pandas, torch, python3): on a developer's
// machine it skips, saying what is missing; under GORUN_E2E=1, the mode CI
// runs in after .ci/run installed all of them, it fails, so that a missing
// package cannot pass CI as a skip. Only tests import it.
package testenv

import (
	"os"
	"testing"
)

// E2E reports whether the tests run as CI runs them (GORUN_E2E=1), where
// every prerequisite is installed.
func E2E() bool { return os.Getenv("GORUN_E2E") == "1" }

// Need returns when ok; otherwise it skips t, or under GORUN_E2E=1 fails
// it, with what is missing ("chromium is not installed (...)").
func Need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if E2E() {
		t.Fatalf("GORUN_E2E=1 but %s", what)
	}
	t.Skipf("skipping: %s", what)
}
