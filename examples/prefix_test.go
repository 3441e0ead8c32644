package examples

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// prefixJob prints one line per rank on stdout.
const prefixJob = `import os
print("hello from", os.environ["RANK"], flush=True)
`

// TestPrefixTemplateE2E: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE on real
// torchrun and real workers. On one local node with --tee 3, each line
// once, with the template as torchrun fills it (gorun's ${node} and
// ${hostname} too), whether or not this torchrun knows the variable
// (1.13 does not: its own copies say "[default0]:" and are dropped all
// the same). Over ssh on the netns cluster, the default prefix has the
// global rank, and the template replaces it.
func TestPrefixTemplateE2E(t *testing.T) {
	needTorch(t)
	job := filepath.Join(t.TempDir(), "job.py")
	if err := os.WriteFile(job, []byte(prefixJob), 0o644); err != nil {
		t.Fatal(err)
	}
	const tmpl = "<${role_name} ${rank}/${local_rank} ${node} $hostname $$>"
	hostname, _ := os.Hostname()
	hellos := func(out string) []string { return regexp.MustCompile(`(?m)^.*hello from \d+$`).FindAllString(out, -1) }
	check := func(t *testing.T, out string, want []string) {
		t.Helper()
		got := hellos(out)
		for _, w := range want {
			if n := strings.Count("\n"+strings.Join(got, "\n")+"\n", "\n"+w+"\n"); n != 1 {
				t.Errorf("%q printed %d times, want once:\n%s", w, n, out)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d lines of the workers, want %d:\n%s", len(got), len(want), out)
		}
	}
	t.Run("local, --tee 3", func(t *testing.T) {
		mark := marker(t)
		r := startGorun(t, []string{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=" + tmpl, "GORUN_MARK=" + mark},
			"--torchrun", shim(t), "--nproc-per-node", "2", "--tee", "3", "--role", "trainer", job, "--tag", mark)
		if code := r.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("exit %d:\n%s", code, r.output())
		}
		var want []string
		for rank := range 2 {
			want = append(want, fmt.Sprintf("<trainer %d/%d localhost %s $>hello from %d", rank, rank, hostname, rank))
		}
		check(t, r.output(), want)
	})
	t.Run("ssh, default and template", func(t *testing.T) {
		c := needCluster(t, 2)
		for _, tc := range []struct {
			env    []string
			format string // node, local rank, global rank
		}{
			{nil, "[%s %d r%d] hello from %[3]d"},
			{[]string{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=" + tmpl}, "<default %[3]d/%[2]d %[1]s HOST $>hello from %[3]d"},
		} {
			mark := marker(t)
			r := startGorun(t, append(tc.env, "GORUN_MARK="+mark), append(c.sshArgs(), "--hosts", c.hostsFlag(2),
				"--torchrun", shim(t), job, "--tag", mark)...)
			if code := r.wait(t, 3*time.Minute); code != 0 {
				t.Fatalf("exit %d:\n%s", code, r.output())
			}
			var want []string
			for n, node := range c.nodes[:2] {
				for lr := range 2 {
					want = append(want, fmt.Sprintf(tc.format, node, lr, 2*n+lr))
				}
			}
			// ${hostname} is each node's own: the line says which, as
			// long as it is a name, not the field.
			out := regexp.MustCompile(`(<default \d+/\d+ \S+) (\S+) \$>`).ReplaceAllStringFunc(r.output(), func(m string) string {
				if strings.Contains(m, "$hostname") || strings.Contains(m, "${") {
					return m
				}
				return regexp.MustCompile(`^(<default \d+/\d+ \S+) \S+ `).ReplaceAllString(m, "$1 HOST ")
			})
			check(t, out, want)
		}
	})
}
