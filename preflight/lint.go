package preflight

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gorun/gorun/internal/lazyre"
)

// Script lint patterns. They run on the script with comments removed and
// triple-quoted strings (docstrings) blanked, so prose does not trigger
// them; one-line string literals stay, since backend="gloo" is one.
var (
	lintFindUnused = lazyre.New(`\bfind_unused_parameters\s*=\s*True\b`)
	lintGloo       = lazyre.New(`\binit_process_group\s*\(\s*["']gloo["']|\bbackend\s*=\s*["']gloo["']`)
	lintCUDAUse    = lazyre.New(`\.cuda\s*\(|\bdevice\s*=\s*["']cuda|\.to\s*\(\s*["']cuda|\btorch\.device\s*\(\s*["']cuda`)
	lintCVDSet     = lazyre.New(`\benviron\s*\[\s*["']CUDA_VISIBLE_DEVICES["']\s*\]\s*=(?:[^=]|$)|` +
		`\benviron\.setdefault\s*\(\s*["']CUDA_VISIBLE_DEVICES["']|\bputenv\s*\(\s*["']CUDA_VISIBLE_DEVICES["']|` +
		`\benviron\.update\s*\(.*CUDA_VISIBLE_DEVICES`)
	lintInitPG   = lazyre.New(`\binit_process_group\s*\(`)
	lintNCCL     = lazyre.New(`["'](?:[a-z]+:)?nccl(?:,[a-z:]+)?["']|\binit_process_group\s*\(\s*\)`)
	lintSetDev   = lazyre.New(`\bset_device\s*\(|\bdevice_id\s*=|\bdevice_ids\s*=`)
	lintRankDev  = lazyre.New(`(?i)local_rank`)
	lintDevUse   = lazyre.New(`(?i)cuda|device|\.to\s*\(`)
	lintFramewrk = lazyre.New(`^\s*(?:from|import)\s+(?:accelerate|lightning|pytorch_lightning|deepspeed|transformers)\b`)
)

// LintScript reads a training script (name is for evidence) and warns about
// patterns that hurt or break distributed jobs: find_unused_parameters=True,
// the gloo backend with CUDA tensors, CUDA_VISIBLE_DEVICES set inside the
// script, and NCCL without a per-rank GPU. It is static and heuristic, so
// every finding is a warning with the line as evidence.
func LintScript(name string, src []byte) []Finding {
	orig := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	code := strings.Split(pythonCode(strings.Join(orig, "\n")), "\n")
	at := func(i int) string {
		line := strings.TrimSpace(orig[i])
		if len(line) > 120 {
			line = line[:117] + "..."
		}
		return fmt.Sprintf("%s:%d: %s", name, i+1, line)
	}
	matches := func(re *regexp.Regexp) (lines []int) {
		for i, l := range code {
			if re.MatchString(l) {
				lines = append(lines, i)
			}
		}
		return lines
	}
	evidence := func(lines []int) string {
		s := make([]string, len(lines))
		for k, i := range lines {
			s[k] = at(i)
		}
		return strings.Join(s, "; ")
	}

	var out []Finding
	if l := matches(lintFindUnused()); l != nil {
		out = append(out, Finding{
			ID:       "script.find-unused-parameters",
			Severity: SeverityWarn,
			Message:  "DDP(find_unused_parameters=True) traverses the autograd graph after every forward pass to find parameters without gradients, which costs time each step",
			Evidence: evidence(l),
			Remedy:   "drop it unless some parameters really get no gradient (DDP then raises an error that says so); for a fixed graph consider static_graph=True",
		})
	}
	if g, c := matches(lintGloo()), matches(lintCUDAUse()); g != nil && c != nil {
		out = append(out, Finding{
			ID:       "script.gloo-cuda",
			Severity: SeverityWarn,
			Message:  "the script uses the gloo backend with CUDA tensors: gloo supports few collectives on CUDA tensors and stages them through host memory, far slower than NCCL",
			Evidence: evidence(append(g, c[0])),
			Remedy:   `use backend="nccl" for GPU training (or "cpu:gloo,cuda:nccl" when CPU tensors are also reduced)`,
		})
	}
	if l := matches(lintCVDSet()); l != nil {
		out = append(out, Finding{
			ID:       "script.cuda-visible-devices",
			Severity: SeverityWarn,
			Message:  "the script sets CUDA_VISIBLE_DEVICES itself: this overrides the GPUs the launcher gave each rank, and has no effect once CUDA is initialised",
			Evidence: evidence(l),
			Remedy:   "remove it; select GPUs with gorun/torchrun options or CUDA_VISIBLE_DEVICES outside the script, and pick the rank's GPU with torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))",
		})
	}
	if out2, ok := lintNoSetDevice(code, matches, evidence); ok {
		out = append(out, out2)
	}
	return out
}

// lintNoSetDevice warns when NCCL is used but nothing pins a GPU per rank.
// Frameworks that place ranks on GPUs themselves are trusted.
func lintNoSetDevice(code []string, matches func(*regexp.Regexp) []int, evidence func([]int) string) (Finding, bool) {
	init := matches(lintInitPG())
	if init == nil || matches(lintNCCL()) == nil || matches(lintSetDev()) != nil || matches(lintFramewrk()) != nil {
		return Finding{}, false
	}
	for _, i := range matches(lintRankDev()) {
		if lintDevUse().MatchString(code[i]) {
			return Finding{}, false // a device built from local_rank
		}
	}
	return Finding{
		ID:       "script.no-set-device",
		Severity: SeverityWarn,
		Message:  "the script uses NCCL but never picks a GPU per rank (torch.cuda.set_device or a device from LOCAL_RANK): every rank on a node may use GPU 0, and NCCL then fails or hangs",
		Evidence: evidence(init[:1]),
		Remedy:   `before init_process_group: local_rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local_rank) (or pass device_id=torch.device("cuda", local_rank))`,
	}, true
}

// pythonCode returns src with comments removed and the contents of
// triple-quoted strings blanked, keeping every newline so line numbers stay.
// One-line string literals are kept when they look like a word or an
// argument ("gloo", "cuda:0"); those holding spaces or '=' are blanked.
func pythonCode(src string) string {
	b := []byte(src)
	out := make([]byte, 0, len(b))
	blank := func(c byte) byte {
		if c == '\n' {
			return '\n'
		}
		return ' '
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '#':
			for i < len(b) && b[i] != '\n' {
				out = append(out, ' ')
				i++
			}
		case (c == '"' || c == '\'') && i+2 < len(b) && b[i+1] == c && b[i+2] == c:
			q := c
			out = append(out, ' ', ' ', ' ')
			i += 3
			for i < len(b) {
				if b[i] == '\\' && i+1 < len(b) {
					out = append(out, blank(b[i]), blank(b[i+1]))
					i += 2
					continue
				}
				if b[i] == q && i+2 < len(b) && b[i+1] == q && b[i+2] == q {
					out = append(out, ' ', ' ', ' ')
					i += 3
					break
				}
				out = append(out, blank(b[i]))
				i++
			}
		case c == '"' || c == '\'':
			q := c
			start := len(out)
			out = append(out, c)
			i++
			for i < len(b) && b[i] != '\n' {
				if b[i] == '\\' && i+1 < len(b) && b[i+1] != '\n' {
					out = append(out, b[i], b[i+1])
					i += 2
					continue
				}
				out = append(out, b[i])
				i++
				if b[i-1] == q {
					break
				}
			}
			// Keep word-like literals ("gloo", "cuda:0", 'LOCAL_RANK');
			// blank prose and code inside strings (spaces or '=').
			if lit := out[start+1:]; strings.ContainsAny(string(lit), " \t=") {
				for k := range lit {
					if k < len(lit)-1 || lit[k] != q {
						lit[k] = ' '
					}
				}
			}
		default:
			out = append(out, c)
			i++
		}
	}
	return string(out)
}
