package envplan

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gorun/gorun/hosts"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenCase is one plan rendered in every format.
type goldenCase struct {
	name  string
	spec  Spec
	facts Facts
}

func goldenCases() []goldenCase {
	local := newSpec([]string{"--nproc-per-node=2"}, "train.py", "--epochs", "1")
	local.Environ = map[string]string{"PATH": "/usr/bin", "NCCL_DEBUG": "INFO", "HOME": "/root"}

	static2 := newSpec([]string{"--max-restarts=3"}, "train.py", "--lr", "3e-4", "--name", "run one")
	static2.Hosts = testHosts("node1:8,node2:8")
	static2.Environ = map[string]string{
		"PATH":             "/opt/torch/bin:/usr/bin",
		"LD_LIBRARY_PATH":  "/usr/local/nvidia/lib64",
		"NCCL_NVLS_ENABLE": "0",
		"NCCL_DEBUG":       "WARN",
	}
	static2.Gorun.Env = []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}

	include3 := newSpec(nil, "train.py")
	include3.Hosts = []hosts.Host{
		{Name: "gpu-a", Slots: 2, GPUs: []int{0, 2}},
		{Name: "gpu-b", Slots: 1, GPUs: []int{3}},
		{Name: "gpu-c", Slots: 4},
	}

	c10d := newSpec([]string{"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
		"--rdzv-endpoint=node1:29400", "--rdzv-id=job42", "--module"}, "trainer.main", "--config", "cfg.yaml")
	c10d.Hosts = testHosts("node1,node2")

	pending := newSpec([]string{"--nproc-per-node=gpu"}, "train.py")
	pending.Hosts = testHosts("node1,node2")
	pending.Environ = map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}

	secrets := newSpec([]string{"--nproc-per-node=2"}, "train.py")
	secrets.Environ = map[string]string{"NCCL_PLUGIN_API_KEY": "exported-secret"}
	secrets.Gorun.Env = []string{"HF_TOKEN=hf_secret", "DATABASE_URL=postgres://app:pw@db:5432/x", "NCCL_IB_PKEY=0x8001"}

	return []goldenCase{
		{"local", local, Facts{"localhost": smallFacts(2, "", "")}},
		{"static2", static2, Facts{
			"node1": dgxFacts("eth0", "10.0.0.1"),
			"node2": dgxFacts("ens1", "10.0.0.2"),
		}},
		{"include3", include3, Facts{
			"gpu-a": smallFacts(4, "eth0", "192.168.1.10"),
			"gpu-b": smallFacts(4, "eth0", "192.168.1.11"),
			"gpu-c": smallFacts(4, "eth1", "192.168.1.12"),
		}},
		{"c10d", c10d, Facts{
			"node1": smallFacts(4, "ib0", "10.1.0.1"),
			"node2": smallFacts(4, "ib0", "10.1.0.2"),
		}},
		{"pending", pending, nil},
		{"secrets", secrets, Facts{"localhost": smallFacts(2, "", "")}},
	}
}

var renderers = []struct {
	ext    string
	render func(*bytes.Buffer, Plan) error
}{
	{"table", func(b *bytes.Buffer, p Plan) error { return RenderTable(b, p) }},
	{"json", func(b *bytes.Buffer, p Plan) error { return RenderJSON(b, p) }},
	{"sh", func(b *bytes.Buffer, p Plan) error { return RenderShell(b, p) }},
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases() {
		p, err := Build(c.spec, c.facts)
		if err != nil {
			t.Fatalf("%s: Build: %v", c.name, err)
		}
		for _, r := range renderers {
			t.Run(c.name+"."+r.ext, func(t *testing.T) {
				var got bytes.Buffer
				if err := r.render(&got, p); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join("testdata", "golden", c.name+"."+r.ext+".golden")
				if *update {
					if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if !bytes.Equal(got.Bytes(), want) {
					t.Errorf("%s differs from the golden file; got:\n%s", path, got.String())
				}
			})
		}
	}
}

// TestTableWidth checks that every table line fits in 80 columns unless a
// single token is wider by itself.
func TestTableWidth(t *testing.T) {
	cases := goldenCases()
	long := newSpec([]string{"--nproc-per-node=3"}, "/very/long/path/to/the/training/script/that/goes/on/and/on/train.py",
		strings.Split(strings.Repeat("--flag value ", 20), " ")...)
	long.Hosts = testHosts("a-rather-long-host-name-in-a-big-cluster-0001.example.org,b")
	long.Gorun.Env = []string{"NCCL_DEBUG_SUBSYS=" + strings.Repeat("INIT,", 30) + "ENV", "X=multi\nline value"}
	cases = append(cases, goldenCase{"long", long, Facts{"b": {CPUs: "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40,42,44,46,48", Gorun: testGorun, Python: testPython}}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Build(c.spec, c.facts)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := RenderTable(&b, p); err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
				if utf8.RuneCountInString(line) <= tableWidth {
					continue
				}
				// Allowed only for a token too long to fit on any line.
				longest := 0
				for _, f := range strings.Fields(line) {
					longest = max(longest, utf8.RuneCountInString(f))
				}
				if longest < tableWidth-20 {
					t.Errorf("line %d has %d columns:\n%s", i+1, utf8.RuneCountInString(line), line)
				}
			}
		})
	}
}

func TestShellParses(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			p, err := Build(c.spec, c.facts)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := RenderShell(&b, p); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(sh, "-n")
			cmd.Stdin = &b
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("sh -n: %v\n%s", err, out)
			}
		})
	}
}

// TestShellRoundTrip runs each rendered command through a real shell with
// the program replaced by a printer, and checks that the shell hands the
// program exactly the planned words and environment.
func TestShellRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	s := newSpec([]string{"--master-addr=$(touch /tmp/pwned)"}, "train.py", hostileWords...)
	s.Hosts = testHosts("n1:2,n2:2")
	s.Gorun.Torchrun = "printf %s\\n"
	s.Gorun.Env = []string{"A_VAR=it's \"x\" $HOME `id`", "EMPTY="}
	p, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := RenderShell(&b, p); err != nil {
		t.Fatal(err)
	}
	// Each command follows its "# node" comment; words may hold newlines.
	blocks := strings.Split(b.String(), "\n# node ")[1:]
	var cmds []string
	for _, blk := range blocks {
		_, cmd, _ := strings.Cut(blk, "\n")
		cmds = append(cmds, strings.TrimSuffix(cmd, "\n"))
	}
	if len(cmds) != 2 {
		t.Fatalf("want 2 commands, got %d:\n%s", len(cmds), b.String())
	}
	for i, line := range cmds {
		// Run the command with printf as the program, then print the
		// planned variables from inside the same environment.
		script := strings.Replace(line, "printf '%s\\n'", `sh -c 'printf "%s\0" "$@" "$A_VAR" "${EMPTY-unset}"' x`, 1)
		out, err := exec.Command(sh, "-c", script).Output()
		if err != nil {
			t.Fatalf("sh -c %q: %v", script, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		want := append(append([]string{}, p.Nodes[i].Command[2:]...), "it's \"x\" $HOME `id`", "")
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Errorf("node %d: shell gave\n%q\nwant\n%q", i, got, want)
		}
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Error("a rendered command ran an embedded command substitution")
	}
}

var hostileWords = []string{
	"", " ", "a b", "it's", "'", "''", `"`, `\`, `\\'`, "$HOME", "${HOME}", "$(id)", "`id`",
	"a;b", "a&&b", "a|b", ">x", "<x", "*", "?", "[a]", "~", "~root", "#c", "a#b", "!",
	"--x=$y", "-", "--", "A=b", "tab\there", "new\nline", "héllo", "{a,b}", "%s", "-e", "-n",
}

func TestRenderJSONEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := RenderJSON(&b, Plan{Nodes: []NodePlan{{Host: "h"}}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"nodes": [`, `"notes": []`, `"command": []`, `"ranks": []`, `"env": {}`, `"rdzv_configs": {}`, `"training_script_args": []`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "null") {
		t.Errorf("JSON has null:\n%s", b.String())
	}
}

func TestRenderBrief(t *testing.T) {
	spec := newSpec([]string{"--nproc_per_node=2"}, "train.py")
	spec.Hosts = testHosts("a:2,b:2")
	p, err := Build(spec, Facts{"a": smallFacts(2, "eth0", "10.0.0.1"), "b": smallFacts(2, "eth0", "10.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := RenderBrief(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"job:        2 nodes x 2 processes = 4 ranks", "node 0: a (10.0.0.1) ranks 0@0-7 1@8-15", "node 1: b (10.0.0.2) ranks 2@0-7 3@8-15"} {
		if !strings.Contains(out, want) {
			t.Errorf("brief lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 80 {
			t.Errorf("line over 80 columns: %q", l)
		}
	}
}

// TestRenderBriefMany: past 16 nodes, runs of nodes alike share a line,
// so 200 nodes print a handful of lines; a node with another rank count
// starts a run of its own, and the nodes after it another.
func TestRenderBriefMany(t *testing.T) {
	var list []string
	facts := Facts{}
	for i := range 200 {
		slots := 2
		if i == 100 {
			slots = 1
		}
		name := fmt.Sprintf("n%d", i)
		list = append(list, fmt.Sprintf("%s:%d", name, slots))
		facts[name] = smallFacts(2, "eth0", fmt.Sprintf("10.0.%d.%d", i/200, i%200+1))
	}
	spec := newSpec([]string{"--nproc_per_node=2"}, "train.py")
	spec.Hosts = testHosts(strings.Join(list, ","))
	p, err := Build(spec, facts)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := RenderBrief(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"nodes 0-99: n[0-99] (100 nodes), ranks 0-199, 2 each, local ranks @0-7 @8-15",
		"node 100: n100 rank 200, local ranks @0-15",
		"nodes 101-199: n[101-199] (99 nodes), ranks 201-398, 2 each, local ranks @0-7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("brief lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n > 12 {
		t.Errorf("%d lines for 200 nodes, want a handful:\n%s", n, out)
	}
}

// secretSpec is a local plan with credentials from every source: exported
// (a carried NCCL_* name), --env by name, a URL's password, a token in a
// debugging knob's value (it reaches a note), beside values that must stay
// visible.
func secretSpec() Spec {
	spec := newSpec(nil, "train.py")
	spec.Gorun.Torchrun = "printf %s\\n"
	spec.Environ = map[string]string{"NCCL_PLUGIN_API_KEY": "s3cr3t-exported", "HF_TOKEN": "shell-value"}
	spec.Gorun.Env = []string{
		"WANDB_API_KEY=s3cr3t-value", "HF_TOKEN=hf_s3cr3t", "LR=3e-4",
		"DATABASE_URL=postgres://app:s3cr3t-pw@db:5432/x", "NCCL_IB_PKEY=0x8001",
		"NCCL_ALGO=ghp_s3cr3t" + strings.Repeat("x", 30),
	}
	// A token's shape in the script's arguments: hidden in the command
	// and the script line too.
	spec.Torchrun.TrainingScriptArgs = []string{"--hub-token", "hf_s3cr3tAbCdEfGhIjKlMnOpQrStUvWxYz0123"}
	return spec
}

func TestSecretsAreNotPrinted(t *testing.T) {
	p, err := Build(secretSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Nodes[0].Env["WANDB_API_KEY"].Value != "s3cr3t-value" {
		t.Fatal("the plan itself must keep the value: the job needs it")
	}
	for name, render := range map[string]func(io.Writer, Plan) error{"table": RenderTable, "json": RenderJSON, "shell": RenderShell, "brief": RenderBrief} {
		var b strings.Builder
		if err := render(&b, p); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, "s3cr3t") {
			t.Errorf("%s shows a secret:\n%s", name, out)
		}
		if name == "brief" {
			continue
		}
		for _, want := range []string{"3e-4", "0x8001"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s hides the ordinary value %s:\n%s", name, want, out)
			}
		}
		if name != "shell" && !strings.Contains(out, "postgres://app:<hidden>@db:5432/x") {
			t.Errorf("%s does not show the URL with its password hidden:\n%s", name, out)
		}
	}
}

// TestShellHiddenValues runs the shell form of a plan with hidden values
// through sh: it must never start with a value other than the plan's, so it
// refuses to start while one is unset, reads a --env value only from
// GORUN_HIDDEN_NAME (the shell's own NAME may differ), and an exported one
// from its own name.
func TestShellHiddenValues(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	p, err := Build(secretSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := RenderShell(&b, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#   HF_TOKEN, given with --env: export GORUN_HIDDEN_HF_TOKEN with its value",
		"#   NCCL_PLUGIN_API_KEY (exported where gorun ran): export it with the same value",
		"#   DATABASE_URL, given with --env: export GORUN_HIDDEN_DATABASE_URL",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("shell form lacks %q:\n%s", want, b.String())
		}
	}
	_, line, _ := strings.Cut(b.String(), "\n# node 0: localhost (address localhost)\n")
	line = strings.TrimSuffix(line, "\n")
	line = strings.Replace(line, "printf '%s\\n'", `sh -c 'printf "%s\0" "$HF_TOKEN" "$WANDB_API_KEY" "$DATABASE_URL" "$NCCL_PLUGIN_API_KEY" "$@"' x`, 1)
	arg := regexp.MustCompile(`(?m)^#   (GORUN_HIDDEN_ARG\d+): export it`).FindStringSubmatch(b.String())
	if arg == nil {
		t.Fatalf("the shell form does not say which variable holds the hidden argument:\n%s", b.String())
	}
	if !strings.Contains(line, "sh -c") {
		t.Fatalf("no program to replace in %q", line)
	}
	all := []string{
		"GORUN_HIDDEN_HF_TOKEN=hf_s3cr3t", "GORUN_HIDDEN_WANDB_API_KEY=s3cr3t-value",
		"GORUN_HIDDEN_DATABASE_URL=postgres://app:s3cr3t-pw@db:5432/x", "GORUN_HIDDEN_NCCL_ALGO=ghp_s3cr3t" + strings.Repeat("x", 30),
		"NCCL_PLUGIN_API_KEY=s3cr3t-exported", arg[1] + "=hf_s3cr3tAbCdEfGhIjKlMnOpQrStUvWxYz0123",
	}
	tests := []struct {
		name    string
		env     []string
		refused string // what stderr names when the command must not start
	}{
		{"nothing exported", nil, "GORUN_HIDDEN_"},
		{"the shell's own HF_TOKEN is not taken", append([]string{"HF_TOKEN=shell-value"}, all[1:]...), "GORUN_HIDDEN_HF_TOKEN: HF_TOKEN, given with --env, is hidden in this plan"},
		{"an exported value must be exported again", all[:4], "NCCL_PLUGIN_API_KEY: hidden in this plan; export it"},
		{"a hidden argument must be exported", append([]string{"HF_TOKEN=shell-value"}, all[:5]...), arg[1] + ": argument"},
		{"an empty value is unset", append([]string{"GORUN_HIDDEN_HF_TOKEN="}, all[1:]...), "GORUN_HIDDEN_HF_TOKEN"},
		{"everything exported", append([]string{"HF_TOKEN=shell-value"}, all...), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(sh, "-c", line)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if tt.refused != "" {
				if err == nil || stdout.Len() > 0 {
					t.Fatalf("the command started (err %v, output %q)", err, stdout.String())
				}
				if !strings.Contains(stderr.String(), tt.refused) {
					t.Errorf("stderr %q does not name %q", stderr.String(), tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			got := strings.Split(strings.TrimSuffix(stdout.String(), "\x00"), "\x00")
			want := []string{"hf_s3cr3t", "s3cr3t-value", "postgres://app:s3cr3t-pw@db:5432/x", "s3cr3t-exported",
				"--max_restarts=0", "--monitor_interval=0.1", "--no_python", "{gorun}", "_rank", "--", "train.py", "--hub-token", "hf_s3cr3tAbCdEfGhIjKlMnOpQrStUvWxYz0123"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("the program got %q, want %q", got, want)
			}
		})
	}
}

// TestNotesHideSecrets: a note quoting a value (here the warning that the
// user's value overrides gorun's) never shows a credential in it.
func TestNotesHideSecrets(t *testing.T) {
	spec := newSpec([]string{"--nproc-per-node=2"}, "train.py")
	spec.Gorun.Env = []string{"OMP_NUM_THREADS=4 token=s3cr3t"}
	p, err := Build(spec, Facts{"localhost": smallFacts(2, "", "")})
	if err != nil {
		t.Fatal(err)
	}
	quoted := false
	for _, n := range p.Notes {
		quoted = quoted || strings.Contains(n.Message, "s3cr3t")
	}
	if !quoted {
		t.Skip("no note quotes the overriding value")
	}
	for name, render := range map[string]func(io.Writer, Plan) error{"table": RenderTable, "json": RenderJSON, "brief": RenderBrief} {
		var b strings.Builder
		if err := render(&b, p); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "s3cr3t") {
			t.Errorf("%s shows a secret:\n%s", name, b.String())
		}
		if !strings.Contains(b.String(), "token=<hidden>") {
			t.Errorf("%s does not show where the secret was:\n%s", name, b.String())
		}
	}
}

// TestEnvNameNotPrinted: a value --env NAME takes from the head's
// environment is not printed in any form of the plan, even one no secret
// rule would hide; the shell form reads it from the running shell.
func TestEnvNameNotPrinted(t *testing.T) {
	s := newSpec(nil, "train.py")
	s.Environ = map[string]string{"MY_SETTING": "plain-value-42"}
	s.Gorun.Env = []string{"MY_SETTING"}
	p, err := Build(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, render := range map[string]func(io.Writer, Plan) error{"table": RenderTable, "json": RenderJSON, "shell": RenderShell, "brief": RenderBrief} {
		var b strings.Builder
		if err := render(&b, p); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "plain-value-42") {
			t.Errorf("%s prints the value of --env MY_SETTING:\n%s", name, b.String())
		}
		if name == "shell" && !strings.Contains(b.String(), `MY_SETTING="${MY_SETTING:?`) {
			t.Errorf("shell does not read MY_SETTING from the running shell:\n%s", b.String())
		}
	}
}
