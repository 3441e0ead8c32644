package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fakeModule is a module whose packages pass, skip, fail, panic, fail to
// build and have no tests, run through the real go test below.
var fakeModule = map[string]string{
	"go.mod":           "module example.com/fake\n\ngo 1.22\n",
	"notest/notest.go": "package notest\n",
	"pass/pass_test.go": `package pass

import "testing"

func TestPass(t *testing.T) { t.Log("a passing test's log, not shown") }

func TestSkip(t *testing.T) { t.Skip("chromium is not installed") }

func TestSub(t *testing.T) {
	t.Run("runs", func(t *testing.T) {})
	t.Run("skips", func(t *testing.T) { t.Skipf("no %s", "pandas") })
	t.Run("silent", func(t *testing.T) { t.SkipNow() })
}
`,
	"fail/fail_test.go": `package fail

import "testing"

func TestFail(t *testing.T) {
	t.Log("why it broke")
	t.Error("broken")
}

func TestSubFail(t *testing.T) {
	t.Run("good", func(t *testing.T) { t.Log("a passing subtest's log, not shown") })
	t.Run("bad", func(t *testing.T) { t.Fatal("bad subtest") })
}

func TestOK(t *testing.T) {}
`,
	"panics/panics_test.go": `package panics

import "testing"

func TestPanics(t *testing.T) {
	t.Log("before the panic")
	panic("boom")
}
`,
	"broken/broken_test.go": "package broken\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { undefined() }\n",
}

func goTest(t *testing.T, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"test", "-count=1"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(out), err == nil
}

// TestAgainstRealGoTest runs the fake module through go test twice, plain
// and -json into summarize: the closing lines are the same; failing tests'
// output is there and passing tests' is not; every skip is listed with its
// reason; the run counts as failed.
func TestAgainstRealGoTest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go test")
	}
	dir := t.TempDir()
	for name, body := range fakeModule {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plain, ok := goTest(t, dir, "./...")
	if ok {
		t.Fatalf("the fake module's tests passed:\n%s", plain)
	}
	stream, _ := goTest(t, dir, "-json", "./...")
	var got bytes.Buffer
	failed, err := summarize(strings.NewReader(stream), &got)
	if err != nil || !failed {
		t.Errorf("summarize = %v, %v; want failed", failed, err)
	}
	out := got.String()

	closing := regexp.MustCompile(`(?m)^(ok|FAIL|\?)[ \t]+\S.*$`) // a package's closing line, one line each
	times := regexp.MustCompile(`\t[0-9.]+s$`)
	norm := func(s string) []string {
		var l []string
		for _, m := range closing.FindAllString(s, -1) {
			l = append(l, times.ReplaceAllString(m, "\tTIME"))
		}
		return l
	}
	// The same lines; the order of packages is go test's (under load
	// -json can end a package without tests earlier) and is passed on as
	// it comes.
	p, g := norm(plain), norm(out)
	slices.Sort(p)
	slices.Sort(g)
	if strings.Join(p, "\n") != strings.Join(g, "\n") {
		t.Errorf("closing lines differ\nplain go test (sorted):\n%s\nsummary (sorted):\n%s\nsummary:\n%s", strings.Join(p, "\n"), strings.Join(g, "\n"), out)
	}
	for _, want := range []string{
		"--- FAIL: TestFail", "why it broke", "broken", "--- FAIL: TestSubFail/bad", "bad subtest",
		"panic: boom", "before the panic", "undefined: undefined",
		"== skipped tests: 3\n",
		"SKIP example.com/fake/pass TestSkip: pass_test.go:7: chromium is not installed\n",
		"SKIP example.com/fake/pass TestSub/skips: pass_test.go:11: no pandas\n",
		"SKIP example.com/fake/pass TestSub/silent: (no reason given)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"not shown", "=== RUN", "--- PASS", "\nPASS\n", "TestOK"} {
		if strings.Contains(out, bad) {
			t.Errorf("summary holds %q, which plain go test does not print:\n%s", bad, out)
		}
	}
	if strings.Contains(out, "SKIP example.com/fake/notest") {
		t.Errorf("a package without test files is listed as a skipped test:\n%s", out)
	}
	if !strings.HasSuffix(out, "\nFAIL\n") {
		t.Errorf("the summary does not end with FAIL, as go test does:\n%s", out)
	}
}

func TestSummarizeEvents(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		failed   bool
		want     string
	}{
		{name: "all pass", in: `{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p"}
`, want: "ok  \tp\t0.01s\n== skipped tests: 0\n"},
		{name: "text that is not JSON passes through", in: "go: no such package\n", failed: false,
			want: "go: no such package\n== skipped tests: 0\n"},
		{name: "a build failure fails", in: `{"ImportPath":"p [p.test]","Action":"build-output","Output":"x.go:1: oops\n"}
{"ImportPath":"p [p.test]","Action":"build-fail"}
{"Action":"output","Package":"p","Output":"FAIL\tp [build failed]\n"}
{"Action":"fail","Package":"p"}
`, failed: true, want: "x.go:1: oops\nFAIL\tp [build failed]\n== skipped tests: 0\nFAIL\n"},
		{name: "a timeout shows the running test's output", in: `{"Action":"output","Package":"p","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"    h_test.go:3: waiting\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1.0s\n"}
{"Action":"fail","Package":"p"}
`, failed: true, want: "panic: test timed out\n    h_test.go:3: waiting\nFAIL\tp\t1.0s\n== skipped tests: 0\nFAIL\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			failed, err := summarize(strings.NewReader(tc.in), &b)
			if err != nil || failed != tc.failed {
				t.Errorf("summarize = %v, %v; want %v", failed, err, tc.failed)
			}
			if b.String() != tc.want {
				t.Errorf("output\n%q\nwant\n%q", b.String(), tc.want)
			}
		})
	}
}
