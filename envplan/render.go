package envplan

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/secret"
	"github.com/gorun/gorun/internal/shell"
)

// tableWidth is the column RenderTable wraps at.
const tableWidth = 80

// RenderTable writes the plan for a person: the job, then per node its
// host, node rank, address, command, environment (each variable with its
// source and reason) and ranks, then the notes. Lines fit in 80 columns
// except where one token (a long value) is wider by itself. Values and notes
// are shown as Redact prints them, in every rendering.
func RenderTable(w io.Writer, p Plan) error {
	bw := bufio.NewWriter(w)
	t := tableWriter{w: bw}
	t.header(p)
	for _, n := range p.Nodes {
		t.node(n)
	}
	if len(p.Notes) > 0 {
		t.line("")
		t.line("notes:")
		for _, n := range p.Notes {
			tag := "[" + n.Level + "]"
			t.wrap("  "+tag+" ", strings.Repeat(" ", 3+len(tag)), secret.Redact("", n.Message))
		}
	}
	return bw.Flush()
}

type tableWriter struct {
	w *bufio.Writer
}

// briefNodes is how many nodes RenderBrief lists a line each; past it,
// runs of nodes alike share one.
const briefNodes = 16

// RenderBrief is what a launch prints before it starts: the job header,
// one line per node (address, ranks, CPUs) and the warnings; --dry-run
// shows the rest. Past briefNodes nodes, each run of consecutive nodes
// with as many ranks and the same CPUs per local rank is one line (a
// launch on 4,096 nodes prints a handful, not 4,096), without the
// addresses.
func RenderBrief(w io.Writer, p Plan) error {
	bw := bufio.NewWriter(w)
	t := tableWriter{w: bw}
	t.header(p)
	if len(p.Nodes) <= briefNodes {
		for _, n := range p.Nodes {
			ranks := make([]string, len(n.Ranks))
			for i, r := range n.Ranks {
				ranks[i] = strconv.Itoa(r.Rank)
				if r.CPUs != "" {
					ranks[i] += "@" + r.CPUs
				}
			}
			t.wrap(fmt.Sprintf("node %d: %s (%s) ", n.NodeRank, n.Host, n.Address), "    ", "ranks "+strings.Join(ranks, " "))
		}
	} else {
		for _, run := range nodeRuns(p.Nodes) {
			t.briefRun(run)
		}
	}
	for _, n := range p.Notes {
		if n.Level == NoteWarn {
			t.wrap("  [warn] ", "         ", secret.Redact("", n.Message))
		}
	}
	t.line("  (gorun --dry-run shows every variable and why)")
	return bw.Flush()
}

// nodeRuns parts nodes into runs of consecutive nodes alike: as many
// ranks, following on from the run's, with the same CPUs per local rank.
func nodeRuns(nodes []NodePlan) [][]NodePlan {
	var runs [][]NodePlan
	for i, n := range nodes {
		if i > 0 {
			prev := runs[len(runs)-1]
			last := prev[len(prev)-1]
			if sameShape(last, n) {
				runs[len(runs)-1] = append(prev, n)
				continue
			}
		}
		runs = append(runs, []NodePlan{n})
	}
	return runs
}

// sameShape reports whether b, after a, is a node like it: its ranks
// follow a's, as many, with the same CPUs local rank by local rank.
func sameShape(a, b NodePlan) bool {
	if len(a.Ranks) != len(b.Ranks) || len(a.Ranks) == 0 || b.Ranks[0].Rank != a.Ranks[len(a.Ranks)-1].Rank+1 {
		return len(a.Ranks) == 0 && len(b.Ranks) == 0
	}
	for i := range a.Ranks {
		if a.Ranks[i].CPUs != b.Ranks[i].CPUs {
			return false
		}
	}
	return true
}

// briefRun is one line for a run of nodes alike: "nodes 0-199: node[0-199]
// (200 nodes), ranks 0-1599, 8 each, local ranks @0-15 @16-31 ...".
func (t tableWriter) briefRun(run []NodePlan) {
	first, last := run[0], run[len(run)-1]
	names := make([]string, len(run))
	for i, n := range run {
		names[i] = n.Host
	}
	head := fmt.Sprintf("node %d: %s ", first.NodeRank, first.Host)
	if len(run) > 1 {
		head = fmt.Sprintf("nodes %d-%d: %s (%d nodes), ", first.NodeRank, last.NodeRank, hosts.Compress(names), len(run))
	}
	per := len(first.Ranks)
	var words []string
	switch {
	case per == 0:
		words = []string{"no", "ranks"}
	case len(run) == 1 && per == 1:
		words = []string{fmt.Sprintf("rank %d", first.Ranks[0].Rank)}
	case len(run) == 1:
		words = []string{fmt.Sprintf("ranks %d-%d", first.Ranks[0].Rank, first.Ranks[per-1].Rank)}
	default:
		words = []string{fmt.Sprintf("ranks %d-%d,", first.Ranks[0].Rank, last.Ranks[per-1].Rank), fmt.Sprintf("%d each", per)}
	}
	if per > 0 && first.Ranks[0].CPUs != "" {
		words[len(words)-1] += ","
		words = append(words, "local", "ranks")
		for _, r := range first.Ranks {
			words = append(words, "@"+r.CPUs)
		}
	}
	t.fill(head, "    ", words, " ", "")
}

func (t tableWriter) line(s string) {
	t.w.WriteString(s)
	t.w.WriteByte('\n')
}

// wrap writes text as words filling lines up to tableWidth, the first line
// after first and the others after indent. Runs of white space (newlines
// in a user's value included) become one space, so no line escapes its
// indent.
func (t tableWriter) wrap(first, indent, text string) {
	t.fill(first, indent, strings.Fields(text), " ", "")
}

// words writes shell words the same way, ending each continued line with
// " \" as a shell would accept it.
func (t tableWriter) words(first, indent string, words []string) {
	t.fill(first, indent, words, " ", " \\")
}

// fill lays tokens out joined by sep, starting a new line (after cont) when
// the next token would pass tableWidth. A token wider than a line gets a
// line of its own.
func (t tableWriter) fill(first, indent string, tokens []string, sep, cont string) {
	cur := first
	empty := true
	for _, tok := range tokens {
		if !empty && len(cur)+len(sep)+len(tok)+len(cont) > tableWidth {
			t.line(cur + cont)
			cur, empty = indent, true
		}
		if !empty {
			cur += sep
		}
		cur += tok
		empty = false
	}
	t.line(cur)
}

func (t tableWriter) header(p Plan) {
	c := p.Config
	ranks, same, known := 0, -1, true
	for _, n := range p.Nodes {
		if len(n.Ranks) == 0 {
			known = false
		}
		if same == -1 {
			same = len(n.Ranks)
		} else if same != len(n.Ranks) {
			same = -2
		}
		ranks += len(n.Ranks)
	}
	job := fmt.Sprintf("%d node%s", len(p.Nodes), plural(len(p.Nodes)))
	switch {
	case len(p.Nodes) == 1 && c.NNodesMax > 1 && !c.Standalone:
		// One gorun per node (a pod, a Slurm task): this plan is one of them.
		job = nodesText(c.NNodesMin, c.NNodesMax) + "; this plan covers this node only"
		if known && same > 0 {
			job += fmt.Sprintf(", %d process%s here", same, pluralES(same))
		}
	case !known:
		job += ", processes per node decided on each node (nproc_per_node=" + c.NProcPerNode + ")"
	case same > 0:
		job += fmt.Sprintf(" x %d process%s = %d rank%s", same, pluralES(same), ranks, plural(ranks))
	default:
		job += fmt.Sprintf(", %d ranks", ranks)
	}
	t.wrap("job:        ", "            ", job)

	var rdzv string
	switch {
	case c.Standalone:
		rdzv = "standalone (torchrun's own c10d on localhost)"
	case c.RdzvBackend == "static" && c.RdzvEndpoint != "" && c.RdzvEndpoint != fmt.Sprintf("%s:%d", c.MasterAddr, c.MasterPort):
		rdzv = "static, store at " + c.RdzvEndpoint
	case c.RdzvBackend == "static":
		rdzv = fmt.Sprintf("static, master %s:%d", c.MasterAddr, c.MasterPort)
	default:
		rdzv = fmt.Sprintf("%s at %s, id %s", c.RdzvBackend, orNone(c.RdzvEndpoint), c.RdzvID)
	}
	if c.NNodesMin != c.NNodesMax {
		rdzv += fmt.Sprintf(", %d to %d nodes", c.NNodesMin, c.NNodesMax)
	}
	t.wrap("rendezvous: ", "            ", rdzv)
	script := append([]string{c.TrainingScript}, c.TrainingScriptArgs...)
	if c.Module {
		script = append([]string{"-m"}, script...)
	}
	t.words("script:     ", "              ", displayWords(secret.RedactArgs(script)))
}

func (t tableWriter) node(n NodePlan) {
	t.line("")
	t.wrap(fmt.Sprintf("node %d: ", n.NodeRank), "    ", displayWord(n.Host)+" (address "+displayWord(n.Address)+")")
	t.line("  command:")
	t.words("    ", "      ", displayWords(secret.RedactArgs(n.Command)))
	t.line("  env:")
	if len(n.Env) == 0 {
		t.line("    (none set)")
	}
	for _, name := range slices.Sorted(maps.Keys(n.Env)) {
		v := n.Env[name]
		value := secret.Hidden
		if shown := v.shown(name); shown != secret.Hidden {
			value = displayWord(shown)
		}
		t.line("    " + name + "=" + value + "  [" + v.Source + "]")
		t.wrap("        ", "        ", v.Reason)
	}
	if len(n.Ranks) == 0 {
		t.line("  ranks: decided on the node")
		return
	}
	t.line("  ranks:")
	t.line("     rank  local   gpu  cpus")
	for _, r := range n.Ranks {
		rank := "?"
		if r.Rank >= 0 {
			rank = strconv.Itoa(r.Rank)
		}
		gpu := "-"
		if r.GPU != nil {
			gpu = strconv.Itoa(*r.GPU)
		}
		cpus := r.CPUs
		if cpus == "" {
			cpus = "-"
		}
		row := fmt.Sprintf("    %5s  %5d  %4s  ", rank, r.LocalRank, gpu)
		// A fragmented cpulist may be long: break it after commas.
		parts := strings.SplitAfter(cpus, ",")
		t.fill(row, strings.Repeat(" ", len(row)), parts, "", "")
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func pluralES(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

// displayWord shows a value in a table: shell-quoted, so its bounds are
// clear, or Go-quoted when it holds control characters a terminal would act
// on.
func displayWord(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return strconv.Quote(s)
		}
	}
	return shell.Quote(s)
}

func displayWords(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = displayWord(w)
	}
	return out
}

// RenderJSON writes the plan as indented JSON, the public
// `--dry-run --format json` contract: fields in struct order, env names
// sorted, and empty lists and maps written as [] and {} rather than null.
func RenderJSON(w io.Writer, p Plan) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(normalize(p)); err != nil {
		return fmt.Errorf("render plan as JSON: %w", err)
	}
	return nil
}

// normalize returns a copy of p with every nil list or map made empty.
func normalize(p Plan) Plan {
	p.Config.TrainingScriptArgs = secret.RedactArgs(p.Config.TrainingScriptArgs) // as in the table; never nil
	if p.Config.RdzvConfigs == nil {
		p.Config.RdzvConfigs = map[string]string{}
	}
	notes := make([]Note, len(p.Notes))
	for i, n := range p.Notes {
		n.Message = secret.Redact("", n.Message) // as in the table
		notes[i] = n
	}
	p.Notes = notes
	nodes := make([]NodePlan, len(p.Nodes))
	for i, n := range p.Nodes {
		n.Command = secret.RedactArgs(n.Command) // as in the table; never nil
		if n.Env == nil {
			n.Env = map[string]Var{}
		}
		env := make(map[string]Var, len(n.Env))
		for name, v := range n.Env {
			v.Value = v.shown(name)
			env[name] = v
		}
		n.Env = env
		if n.Ranks == nil {
			n.Ranks = []RankPlan{}
		}
		nodes[i] = n
	}
	p.Nodes = nodes
	return p
}

// RenderShell writes one POSIX sh command per node, to be run on that node:
// `env NAME=value ... torchrun ...`, preceded by a comment naming the host.
// Only the variables gorun or the user set appear; torchrun sets the rest
// itself.
//
// A value Redact would hide is not printed, and never silently replaced
// by another: the command reads it from a variable of the shell that runs
// it, and stops before starting when that variable is unset or empty
// (${VAR:?...}). A value the user exported where gorun ran comes from the
// same name (the same value, when the user runs the command as gorun was
// run); any other, a --env value above all, comes from GORUN_HIDDEN_NAME,
// since the running shell's own NAME may hold another value. A comment at
// the top lists what to export.
func RenderShell(w io.Writer, p Plan) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# gorun plan: %d node%s; run each command on the host named above it.\n", len(p.Nodes), plural(len(p.Nodes)))
	advice := map[string]string{}
	for _, n := range p.Nodes {
		for name, v := range n.Env {
			if v.Source != SourceTorchrun && hiddenInShell(name, v) {
				_, advice[name] = shellHidden(name, v)
			}
		}
		for i, a := range n.Command {
			if word := shellHiddenArg(i, a); word != "" {
				advice[hiddenArgName(i)] = hiddenArgName(i) + ": export it with the command's argument " + strconv.Itoa(i) + " (a secret's shape: not printed)"
			}
		}
	}
	if len(advice) > 0 {
		bw.WriteString("# Values hidden in this plan are read from the shell that runs a command,\n" +
			"# which stops before starting when one is unset:\n")
		for _, name := range slices.Sorted(maps.Keys(advice)) {
			bw.WriteString("#   " + commentSafe(advice[name]) + "\n")
		}
	}
	for _, n := range p.Nodes {
		fmt.Fprintf(bw, "# node %d: %s (address %s)\n", n.NodeRank, commentSafe(n.Host), commentSafe(n.Address))
		var words []string
		for _, name := range slices.Sorted(maps.Keys(n.Env)) {
			v := n.Env[name]
			if v.Source == SourceTorchrun {
				continue
			}
			if !validEnvName(name) {
				return fmt.Errorf("render plan as shell: node %s: %q is not a variable name", n.Host, name)
			}
			if hiddenInShell(name, v) {
				word, _ := shellHidden(name, v)
				words = append(words, word)
				continue
			}
			words = append(words, name+"="+shell.Quote(v.Value))
		}
		if len(words) > 0 {
			words = append([]string{"env"}, words...)
		}
		for i, a := range n.Command {
			if word := shellHiddenArg(i, a); word != "" {
				words = append(words, word)
				continue
			}
			words = append(words, shell.Quote(a))
		}
		bw.WriteString(strings.Join(words, " "))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// hiddenInShell reports whether the shell form must not print the value.
// An empty value hides nothing.
func hiddenInShell(name string, v Var) bool {
	return v.Value != "" && v.shown(name) != v.Value
}

// shown is the value as a plan prints it: as secret.Redact shows it, and
// never one given as --env NAME, which the user asked to be taken from
// the head without being written out.
func (v Var) shown(name string) string {
	if v.Source == SourceUser && v.Reason == reasonEnvHead && v.Value != "" {
		return secret.Hidden
	}
	return secret.Redact(name, v.Value)
}

// shellHidden returns the assignment that passes a hidden value from the
// running shell, refusing to start without it, and the line that tells
// the user what to export. name must be a valid variable name: it appears
// unquoted.
func shellHidden(name string, v Var) (word, advice string) {
	if v.Source == SourceUser && (v.Reason == reasonExported || v.Reason == reasonExportedHead || v.Reason == reasonEnvHead) {
		return name + `="${` + name + `:?hidden in this plan; export it with the value it had where gorun ran}"`,
			name + " (exported where gorun ran): export it with the same value"
	}
	from := hiddenShellPrefix + name
	origin := ""
	if v.Source == SourceUser && v.Reason == reasonEnvFlag {
		origin = ", given with --env,"
	}
	return name + `="${` + from + `:?` + name + origin + ` is hidden in this plan; export ` + from + ` with its value}"`,
		name + strings.TrimSuffix(origin, ",") + ": export " + from + " with its value; " +
			name + " itself is not read, since the running shell's may hold another"
}

// shellHiddenArg is the word that reads command argument i from the
// running shell where Redact would hide a, as a --env value is read; ""
// where a may be printed.
func shellHiddenArg(i int, a string) string {
	if secret.Redact("", a) == a {
		return ""
	}
	return `"${` + hiddenArgName(i) + `:?argument ` + strconv.Itoa(i) + ` is hidden in this plan; export ` + hiddenArgName(i) + ` with its value}"`
}

func hiddenArgName(i int) string { return hiddenShellPrefix + "ARG" + strconv.Itoa(i) }

// hiddenShellPrefix names the variable the shell form reads a hidden value
// from when the running shell's variable of the same name may differ.
const hiddenShellPrefix = "GORUN_HIDDEN_"

// commentSafe keeps a value on its comment line.
func commentSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
