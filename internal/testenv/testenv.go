// Package testenv holds the one rule for a test that needs something this
// machine may lack (chromium, pandas, torch, python3): on a developer's
// machine it skips, saying what is missing; under GORUN_E2E=1, the mode CI
// runs in after .ci/run installed all of them, it fails, so that a missing
// package cannot pass CI as a skip. TorchPython applies it to the one
// prerequisite two packages' tests share: an interpreter with torch. Only
// tests import it.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
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

// TorchPython returns an interpreter with torch and its gloo backend, for
// the tests that run preflight's bandwidth script for real (CPU and gloo):
// GORUN_TEST_PYTHON when set, else python3 from the PATH or /usr/bin. It
// skips t under -short, and where there is none it skips or fails as Need
// does.
func TorchPython(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	candidates := []string{"python3", "/usr/bin/python3"}
	if py := os.Getenv("GORUN_TEST_PYTHON"); py != "" {
		candidates = []string{py}
	}
	for _, py := range candidates {
		if err := exec.Command(py, "-c", "import torch.distributed as d; assert d.is_gloo_available()").Run(); err == nil {
			return py
		}
	}
	Need(t, false, fmt.Sprintf("no torch with gloo in %q (Debian: python3-torch; GORUN_TEST_PYTHON names another)", candidates))
	return ""
}
