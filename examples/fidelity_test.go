package examples

import (
	"archive/zip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The fidelity suite (docs/compatibility.md, "What a pooled worker guarantees"): a
// script that records what a training script can observe
// (fidelity/probe.py), or a case of fidelity/cases that does something
// before its `import torch`, runs under torchrun and under gorun, and
// fidelity/compare.py lists every difference between what their ranks
// saw; one outside docs/compatibility.md's allowlist fails the test.

func fidelityDir(t *testing.T, rel string) string { return absPath(t, filepath.Join("fidelity", rel)) }

// fidelityTorchrun runs torchrun (the Debian shim) as a user would,
// without gorun, and returns the folder its ranks wrote to.
func fidelityTorchrun(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(shim(t), args...)
	cmd.Dir = dir
	// What startCmd gives gorun too.
	cmd.Env = append(append(os.Environ(), env...), "NO_COLOR=1", "PYTHONUNBUFFERED=1", "FIDELITY_OUT="+out, "FIDELITY_CASES="+fidelityDir(t, "cases"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torchrun %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// fidelityGorun runs gorun with args, which must succeed, and returns the
// folder its ranks wrote to, and its output.
func fidelityGorun(t *testing.T, dir string, env []string, args ...string) (string, string) {
	t.Helper()
	out, code, output := fidelityGorunCode(t, dir, env, args...)
	if code != 0 {
		t.Fatalf("gorun %s: exit %d\n%s", strings.Join(args, " "), code, output)
	}
	return out, output
}

// fidelityGorunCode runs gorun with args and returns the folder its ranks
// wrote to, its exit code and its output.
func fidelityGorunCode(t *testing.T, dir string, env []string, args ...string) (string, int, string) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(gorunBin, args...)
	cmd.Dir = dir
	r := startCmd(t, cmd, append(env, "FIDELITY_OUT="+out, "FIDELITY_CASES="+fidelityDir(t, "cases")))
	code := r.wait(t, 4*time.Minute)
	return out, code, r.output()
}

// compareFidelity fails t on every difference outside the allowlist
// between the baseline's ranks and the run's.
func compareFidelity(t *testing.T, baseline, run, label string) {
	t.Helper()
	cmd := exec.Command("python3", fidelityDir(t, "compare.py"), baseline, run, "--label", label, "--readme", absPath(t, "../docs/compatibility.md"))
	b, err := cmd.CombinedOutput()
	t.Logf("%s", b)
	if err != nil {
		t.Errorf("compare.py %s: %v (a difference outside docs/compatibility.md's allowlist, listed above as DIFFERS)", label, err)
	}
}

// pooledRun fails t unless every worker of gorun's run was pooled.
func pooledRun(t *testing.T, out string) {
	t.Helper()
	if i := strings.Index(out, "without the worker pool"); i >= 0 {
		line := out[strings.LastIndex(out[:i], "\n")+1:]
		if j := strings.Index(line, "\n"); j >= 0 {
			line = line[:j]
		}
		t.Errorf("a worker started cold (%s):\n%s", line, out)
	}
}

// coldRun fails t unless gorun said why its workers started cold, with want.
func coldRun(t *testing.T, out, want string) {
	t.Helper()
	re := regexp.MustCompile(`workers start without the worker pool: .*` + regexp.QuoteMeta(want))
	if !re.MatchString(out) {
		t.Errorf("gorun did not say its workers start cold because of %q:\n%s", want, out)
	}
}

// TestFidelityLocal: the probe on 2 local ranks, against torchrun: gorun
// with the pool, without it, and a restarted attempt (its workers from the
// warm standby's pool).
func TestFidelityLocal(t *testing.T) {
	needTorch(t)
	dir := absPath(t, ".")
	probe := fidelityDir(t, "probe.py")
	base := fidelityTorchrun(t, dir, nil, "--nproc_per_node=2", probe, "a", "b c")
	pooled, out := fidelityGorun(t, dir, nil, "--torchrun", shim(t), "--prewarm", "torch", "--nproc_per_node=2", probe, "a", "b c")
	cold, _ := fidelityGorun(t, dir, nil, "--torchrun", shim(t), "--prewarm", "off", "--nproc_per_node=2", probe, "a", "b c")
	t.Run("pooled", func(t *testing.T) {
		pooledRun(t, out)
		compareFidelity(t, base, pooled, "pooled")
	})
	t.Run("cold", func(t *testing.T) {
		compareFidelity(t, base, cold, "cold")
	})
	t.Run("pooled against cold", func(t *testing.T) {
		// The same plan on both sides: what the pool alone changes.
		compareFidelity(t, cold, pooled, "pool")
	})
	t.Run("restart", func(t *testing.T) {
		crash := []string{"FIDELITY_CRASH_ATTEMPT=0"}
		base := fidelityTorchrun(t, dir, crash, "--nproc_per_node=2", "--max_restarts=1", probe, "a", "b c")
		run, out := fidelityGorun(t, dir, crash, "--torchrun", shim(t), "--prewarm", "torch", "--max-restarts", "1", "--nproc_per_node=2", probe, "a", "b c")
		if !regexp.MustCompile(`\(2 of 2 pooled\)`).MatchString(out) {
			t.Errorf("the restarted attempt's workers were not both pooled:\n%s", out)
		}
		compareFidelity(t, base, run, "restart")
	})
}

// TestClusterFidelity: the probe over ssh on a node of the netns cluster,
// 2 ranks, against torchrun started there over ssh as a user would.
func TestClusterFidelity(t *testing.T) {
	c := needCluster(t, 1)
	dir := absPath(t, ".")
	probe := fidelityDir(t, "probe.py")
	out := t.TempDir()
	remote := "cd " + dir + " && unset OLDPWD && FIDELITY_OUT=" + out + " " + shim(t) + " --nproc_per_node=2 " + probe + " a 'b c'"
	ssh := exec.Command("ssh", "-F", filepath.Join(c.state, "ssh_config"), c.nodes[0], remote)
	// The node's own locale, as gorun's agent has it: OpenSSH's client
	// would send LANG and LC_* (SendEnv), gorun sends none.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANG=") && !strings.HasPrefix(kv, "LC_") {
			ssh.Env = append(ssh.Env, kv)
		}
	}
	if b, err := ssh.CombinedOutput(); err != nil {
		t.Fatalf("torchrun over ssh: %v\n%s", err, b)
	}
	run := t.TempDir()
	// Over ssh the head's environment stays behind: --env takes it along.
	args := append(c.sshArgs(), "--hosts", c.nodes[0]+":2", "--torchrun", shim(t), "--prewarm", "torch", "--env", "FIDELITY_OUT="+run, probe, "a", "b c")
	cmd := exec.Command(gorunBin, args...)
	cmd.Dir = dir
	r := startCmd(t, cmd, nil)
	if code := r.wait(t, 4*time.Minute); code != 0 {
		t.Fatalf("gorun over ssh: exit %d\n%s", code, r.output())
	}
	pooledRun(t, r.output())
	compareFidelity(t, out, run, "ssh")
}

// TestFidelityCases: each thing a script may do that a pooled worker
// would not see as a cold one does, against torchrun, with the pool on.
func TestFidelityCases(t *testing.T) {
	needTorch(t)
	cases := fidelityDir(t, "cases")
	gorun := func(t *testing.T, env []string, args ...string) (string, string) {
		return fidelityGorun(t, cases, env, append([]string{"--torchrun", shim(t), "--prewarm", "torch", "--nproc_per_node=2"}, args...)...)
	}
	same := func(t *testing.T, env []string, args ...string) string {
		base := fidelityTorchrun(t, cases, env, append([]string{"--nproc_per_node=2"}, args...)...)
		run, out := gorun(t, env, args...)
		compareFidelity(t, base, run, "case")
		return out
	}
	t.Run("per-rank seeds", func(t *testing.T) {
		pooledRun(t, same(t, nil, "seeds.py"))
	})
	t.Run("PYTHONHASHSEED holds", func(t *testing.T) {
		pooledRun(t, same(t, []string{"PYTHONHASHSEED=7"}, "seeds.py"))
	})
	t.Run("OMP_NUM_THREADS set by the script", func(t *testing.T) {
		coldRun(t, same(t, nil, "omp_before_import.py"), "omp_before_import.py:6 sets OMP_NUM_THREADS before it imports torch")
	})
	t.Run("sys.path edited before the import", func(t *testing.T) {
		coldRun(t, same(t, nil, "syspath_before_import.py"), "syspath_before_import.py:8 changes sys.path before it imports torch")
	})
	t.Run("warnings.simplefilter error before the import", func(t *testing.T) {
		coldRun(t, same(t, nil, "warnings_before_import.py"), "warnings_before_import.py:7 sets warnings filters before it imports torch")
	})
	t.Run("atexit order", func(t *testing.T) {
		coldRun(t, same(t, nil, "atexit_before_import.py"), "atexit_before_import.py:17 registers an atexit handler before it imports torch")
	})
	t.Run("a directory with __main__.py", func(t *testing.T) {
		pooledRun(t, same(t, nil, "asdir", "x"))
	})
	t.Run("a zip file with __main__.py", func(t *testing.T) {
		z := filepath.Join(t.TempDir(), "asdir.zip")
		zipMain(t, filepath.Join(cases, "asdir", "__main__.py"), z)
		pooledRun(t, same(t, nil, z, "x"))
	})
	t.Run("-m", func(t *testing.T) {
		pooledRun(t, same(t, nil, "-m", "args", "x"))
	})
	t.Run("30,000 arguments", func(t *testing.T) {
		args := []string{"args.py"}
		for i := range 30000 {
			args = append(args, "arg"+strings.Repeat("x", i%7))
		}
		pooledRun(t, same(t, nil, args...))
	})
	failing := func(t *testing.T, script string) string {
		_, code, out := fidelityGorunCode(t, cases, nil, "--torchrun", shim(t), "--prewarm", "torch", "--nproc_per_node=2", script)
		if code != 1 {
			t.Errorf("exit %d, want the worker's 1:\n%s", code, out)
		}
		pooledRun(t, out)
		return out
	}
	t.Run("a SyntaxError's traceback has no frame of gorun's", func(t *testing.T) {
		out := failing(t, "syntax_error.py")
		if !strings.Contains(out, `syntax_error.py", line 4`) || !strings.Contains(out, "SyntaxError") {
			t.Errorf("no SyntaxError at line 4:\n%s", out)
		}
		noShimFrames(t, out)
	})
	t.Run("a traceback starts at the script", func(t *testing.T) {
		out := failing(t, "raises.py")
		if !regexp.MustCompile(`Traceback \(most recent call last\):\n\S* *File "` + regexp.QuoteMeta(cases) + `/raises.py", line 9, in <module>`).MatchString(out) {
			t.Errorf("the traceback does not start at raises.py line 9:\n%s", out)
		}
		noShimFrames(t, out)
	})
	t.Run("a variable changed at run time is detected and learned", func(t *testing.T) {
		cache := []string{"XDG_CACHE_HOME=" + t.TempDir()}
		base := fidelityTorchrun(t, cases, nil, "--nproc_per_node=2", "runtime_var.py")
		_, out := gorun(t, cache, "runtime_var.py")
		pooledRun(t, out)
		said := regexp.MustCompile(`gorun: this worker's interpreter \(the worker pool\) imported its modules before its script ran: it set OMP_NUM_THREADS at \S*runtime_var_helper.py:4 \(from \S*runtime_var.py:8\)`)
		if n := len(said.FindAllString(out, -1)); n != 1 {
			t.Errorf("the change was said %d times, want once for the node:\n%s", n, out)
		}
		run, out := gorun(t, cache, "runtime_var.py") // the next run of the script
		coldRun(t, out, "an earlier pooled worker of this script set OMP_NUM_THREADS at")
		compareFidelity(t, base, run, "case")
		// A restarted attempt: the first attempt learns it, the next starts cold.
		cache = []string{"XDG_CACHE_HOME=" + t.TempDir(), "FIDELITY_CRASH_ATTEMPT=0"}
		base = fidelityTorchrun(t, cases, cache, "--nproc_per_node=2", "--max_restarts=1", "runtime_var.py")
		run, out = gorun(t, cache, "--max-restarts", "1", "runtime_var.py")
		coldRun(t, out, "an earlier pooled worker of this script set OMP_NUM_THREADS at")
		compareFidelity(t, base, run, "case")
	})
}

// noShimFrames fails t if a traceback in out names a file of gorun's.
func noShimFrames(t *testing.T, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `File "`) && (strings.Contains(l, "warm") || strings.Contains(l, "runpy")) {
			t.Errorf("a frame of gorun's: %s\n%s", l, out)
		}
	}
}

// zipMain writes a zip file holding main as __main__.py.
func zipMain(t *testing.T, main, to string) {
	t.Helper()
	f, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	w, err := z.Create("__main__.py")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(main)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := io.Copy(w, src); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
