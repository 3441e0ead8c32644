package examples

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// console runs testcluster/console.py in mode under gorun in local mode,
// with one worker, and returns every chunk of gorun's stdout and stderr (one
// pipe, as under 2>&1) with the time it arrived.
func console(t *testing.T, mode string, env ...string) (chunks [][]byte, at []time.Time, code int) {
	t.Helper()
	needTorch(t)
	cmd := exec.Command(gorunBin, "--torchrun", shim(t), "--standalone", "--nproc-per-node", "1", absPath(t, "testcluster/console.py"))
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1", "CONSOLE_MODE="+mode), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	pr.SetReadDeadline(time.Now().Add(2 * time.Minute))
	buf := make([]byte, 1<<16)
	for {
		n, err := pr.Read(buf)
		if n > 0 {
			chunks, at = append(chunks, bytes.Clone(buf[:n])), append(at, time.Now())
		}
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return chunks, at, code
}

// TestLocalProgressBarLive: a bar of "\r" updates without a newline reaches
// the console as it is written (torchrun: first chunk at once, every
// update), not in one burst at its end, and its bytes are unchanged.
func TestLocalProgressBarLive(t *testing.T) {
	chunks, at, code := console(t, "bar", "BAR_STEPS=20", "BAR_SLEEP=0.1")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, bytes.Join(chunks, nil))
	}
	stamp := regexp.MustCompile(`\r step (\d+)/20 t=([0-9.]+)`)
	var lags []time.Duration
	var bar []byte
	for i, c := range chunks {
		m := stamp.FindSubmatch(c)
		if m == nil {
			continue
		}
		bar = append(bar, c...)
		sec, _ := strconv.ParseFloat(string(m[2]), 64)
		lags = append(lags, at[i].Sub(time.Unix(0, int64(sec*1e9))))
	}
	t.Logf("%d chunks with updates; lag of each chunk's oldest update: %v", len(lags), lags)
	if len(lags) < 5 {
		t.Fatalf("the bar came in %d chunks, want it live (>= 5 of its 21 updates over 2 s):\n%q", len(lags), bar)
	}
	for i, l := range lags {
		if l > time.Second {
			t.Errorf("chunk %d arrived %v after its first update was written, want within 1 s", i, l)
		}
	}
	// The bar's bytes, from its first update to its own newline, which
	// may come in a chunk of its own.
	out := bytes.Join(chunks, nil)
	first := bytes.Index(out, []byte("\r step 0/20"))
	end := bytes.IndexByte(out[max(first, 0):], '\n')
	if first < 0 || end < 0 {
		t.Fatalf("no whole bar in the output: %q", out)
	}
	bar = out[first : first+end+1]
	all := stamp.FindAllSubmatch(bar, -1)
	if n := len(all); n != 21 || string(all[n-1][1]) != "20" {
		t.Errorf("%d updates, want 21 and only the bar's own newline, at its end: %q", n, bar)
	}
}

// TestLocalBytesKept: in local mode a worker's "\r\n" and its last line
// without a newline reach the console as it wrote them.
func TestLocalBytesKept(t *testing.T) {
	chunks, _, code := console(t, "crlf")
	out := bytes.Join(chunks, nil)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !bytes.Contains(out, []byte("crlf line\r\nno newline at the end")) {
		t.Fatalf("want the worker's bytes as written, got %q", out)
	}
}

// TestLocalStdoutStderrOrder: with gorun's stdout and stderr one pipe (as
// under 2>&1), a worker that prints to each in turn is seen in the order it
// printed (before: stdout in batches, then stderr).
func TestLocalStdoutStderrOrder(t *testing.T) {
	chunks, _, code := console(t, "alternate", "ALT_LINES=400")
	out := bytes.Join(chunks, nil)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	line := regexp.MustCompile(`(?m)^(out|err) (\d+)$`)
	next, wrong := 0, 0
	for _, m := range line.FindAllSubmatch(out, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		if n != next {
			wrong++
		}
		next = n + 1
	}
	if next != 400 || wrong != 0 {
		t.Fatalf("%d lines out of place, last line %d (want 0 and 399):\n%s", wrong, next-1, out)
	}
}

// TestLocalSummaryEscaped: the failure summary quotes the worker's last
// line with its escape sequences shown, not replayed; the worker's own line
// passes through unchanged.
func TestLocalSummaryEscaped(t *testing.T) {
	chunks, _, code := console(t, "escape")
	out := bytes.Join(chunks, nil)
	if code != 3 {
		t.Fatalf("exit %d, want the worker's 3:\n%s", code, out)
	}
	raw := []byte("boom \x1b[2J\x1b]0;title\x07 cleared\n")
	quoted := []byte(`boom \x1b[2J\x1b]0;title\x07 cleared`)
	if bytes.Count(out, raw) != 1 || !bytes.Contains(out, quoted) || bytes.Count(out, []byte("\x1b")) != 2 {
		t.Fatalf("want the worker's line once as written and the summary's quote escaped:\n%q", out)
	}
}
