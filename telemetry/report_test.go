package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// testReport is two nodes of two GPUs for a minute, with a restart after
// 30 s and node2 gpu1 running slow; NVLink is reported by node1 only.
func testReport(t *testing.T) (*Report, ReportInfo) {
	t.Helper()
	r := NewReport()
	t0 := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	r.Mark(Marker{Time: t0, Label: "attempt 1 starts", Kind: "attempt"})
	r.Mark(Marker{Time: t0.Add(30 * time.Second), Label: "node2 failed (exit 1: worker rank 3 exited with 1)", Kind: "failure"})
	r.Mark(Marker{Time: t0.Add(31 * time.Second), Label: "attempt 2 starts", Kind: "attempt"})
	for i := range 60 {
		now := t0.Add(time.Duration(i) * time.Second)
		for _, node := range []string{"node1", "node2"} {
			for g := range 2 {
				sm := gpuSample(node, g, now, 95, 1980)
				sm.PowerW, sm.MemUsedMiB = f64(600), f64(40000)
				sm.PCIeRxMBps, sm.PCIeTxMBps = f64(100), f64(50)
				if node == "node1" {
					sm.NVLinkRxMBps, sm.NVLinkTxMBps = f64(200_000), f64(200_000)
				}
				if node == "node2" && g == 1 {
					sm.SMPct, sm.SMClockMHz = f64(40), f64(1200)
				}
				r.Add(sm)
			}
		}
	}
	r.Finding(Finding{Time: t0.Add(20 * time.Second), Node: "node2", GPU: 1, Ranks: []int{3}, Kind: "low_util", Evidence: "SM utilisation 40% for 10s"})
	info := ReportInfo{Command: "gorun --hosts node1:2,node2:2 train.py <x>", Start: t0, End: t0.Add(time.Minute),
		Result: "succeeded after 2 attempts", Preflight: "preflight: 2 nodes ok", Plan: "node1 rank 0 gpu 0\nnode2 rank 3 gpu 1"}
	return r, info
}

func TestReportSelfContained(t *testing.T) {
	r, info := testReport(t)
	var b bytes.Buffer
	if err := r.WriteHTML(&b, info); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	// Nothing that a browser would fetch: no src or href at all, and no
	// URL but the SVG namespace (a name, never fetched).
	for _, bad := range []string{"src=", "href=", "<script", "@import", "url("} {
		if strings.Contains(html, bad) {
			t.Errorf("report contains %q", bad)
		}
	}
	for _, u := range regexp.MustCompile(`https?://[^"' <]+`).FindAllString(html, -1) {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("report names URL %s", u)
		}
	}
	if !strings.Contains(html, "train.py &lt;x&gt;") {
		t.Error("the command is not escaped")
	}
}

func TestReportLargeRunIsBounded(t *testing.T) {
	r := NewReport()
	t0 := time.Unix(0, 0)
	for i := range 3 * maxPoints {
		r.Add(gpuSample("n", 0, t0.Add(time.Duration(i)*time.Second), float64(i%100), 1980))
	}
	if n := len(r.series[gpuKey{"n", 0}].points); n > maxPoints {
		t.Errorf("%d points kept, want at most %d", n, maxPoints)
	}
}

// TestReportInBrowser loads the report in headless Chromium (Debian's
// chromium package; CI installs it): any console message (a script error,
// a fetch the Content-Security-Policy blocked) fails the test, and the
// plots must hold the expected series.
func TestReportInBrowser(t *testing.T) {
	chromium := findChromium()
	testenv.Need(t, chromium != "", "chromium is not installed (apt-get install chromium; .ci/run installs it), so the report is not checked in a browser")
	r, info := testReport(t)
	var b bytes.Buffer
	if err := r.WriteHTML(&b, info); err != nil {
		t.Fatal(err)
	}

	t.Run("the check catches console errors", func(t *testing.T) {
		// A page with an error must fail the check, or the check proves nothing.
		bad := strings.Replace(b.String(), "</body>", `<img src="http://example.invalid/x.png"></body>`, 1)
		_, console := loadInBrowser(t, chromium, bad)
		if len(console) == 0 {
			t.Fatal("a blocked fetch left no console message: the check cannot see errors")
		}
	})

	dom, console := loadInBrowser(t, chromium, b.String())
	for _, c := range console {
		t.Errorf("console: %s", c)
	}
	want := map[string]int{"sm": 4, "power": 4, "clock": 4, "nvlink": 2, "pcie": 4, "temp": 4, "mem": 4}
	for metric, n := range want {
		svg := between(dom, `<svg class="chart" data-metric="`+metric+`"`, "</svg>")
		if svg == "" {
			t.Errorf("%s: no chart in the rendered page", metric)
			continue
		}
		if got := strings.Count(svg, `class="series"`); got != n {
			t.Errorf("%s: %d series, want %d", metric, got, n)
		}
		for _, g := range []string{"node1 gpu0", "node1 gpu1"} {
			if !strings.Contains(svg, `data-gpu="`+g+`"`) {
				t.Errorf("%s: no series for %s", metric, g)
			}
		}
		if got := strings.Count(svg, `class="marker failure"`); got != 1 {
			t.Errorf("%s: %d failure markers, want 1", metric, got)
		}
		if got := strings.Count(svg, `class="marker attempt"`); got != 2 {
			t.Errorf("%s: %d attempt markers, want 2", metric, got)
		}
	}
	for _, s := range []string{"preflight: 2 nodes ok", "node2 rank 3 gpu 1", "gorun: node2 gpu1 (rank 3): SM utilisation 40%", "succeeded after 2 attempts"} {
		if !strings.Contains(dom, s) {
			t.Errorf("rendered page lacks %q", s)
		}
	}
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// loadInBrowser renders page in headless Chromium and returns the DOM
// after load and every console message.
func loadInBrowser(t *testing.T, chromium, page string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--enable-logging=stderr", "--v=0",
		"--dump-dom", "file://"+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	var console []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			console = append(console, line)
		}
	}
	if !strings.Contains(stdout.String(), "gorun run report") {
		t.Fatalf("chromium rendered no report:\n%s", fmt.Sprint(stdout.String()[:min(500, stdout.Len())]))
	}
	return stdout.String(), console
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	j := strings.Index(s[i:], end)
	if j < 0 {
		return ""
	}
	return s[i : i+j]
}

// TestReportStepBands: 64 ranks on 2 nodes draw as 2 bands with a
// median line each, of at most stepBuckets+1 points, plus a straggler's
// dashed line: the chart's size follows the nodes, not the ranks.
func TestReportStepBands(t *testing.T) {
	r := NewReport()
	t0 := time.Unix(1000, 0)
	for rank := range 64 {
		s := StepSeries{Node: fmt.Sprintf("node%d", rank/32), Rank: rank, Attempt: 1, Straggler: rank == 5}
		for i := range 2000 {
			s.T = append(s.T, t0.Add(time.Duration(i)*100*time.Millisecond))
			s.N = append(s.N, int64(i))
		}
		r.AddSteps(s)
	}
	var b strings.Builder
	if err := r.WriteHTML(&b, ReportInfo{Start: t0, End: t0.Add(200 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	if n := strings.Count(html, `<polygon class="band"`); n != 2 {
		t.Errorf("%d bands, want 2 (one per node)", n)
	}
	if !strings.Contains(html, `data-metric="steps"`) || !strings.Contains(html, "node0 rank 5 (straggler)") {
		t.Errorf("no step chart with the straggler")
	}
	for _, m := range regexp.MustCompile(`data-points="(\d+)"`).FindAllStringSubmatch(html, -1) {
		if n, _ := strconv.Atoi(m[1]); n > stepBuckets+1 {
			t.Errorf("a line of %d points, want at most %d", n, stepBuckets+1)
		}
	}
	if len(html) > 200<<10 {
		t.Errorf("report of %d KiB for 64 ranks", len(html)>>10)
	}
}
