package preflight

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"github.com/gorun/gorun/internal/nccldebug"
	"github.com/gorun/gorun/internal/secret"
	"github.com/gorun/gorun/internal/userr"
)

// The variable lists gorun carries, taken from NCCL 2.30.7's sources:
// names NCCL reads (NCCL_PARAM and ncclGetEnv), names only its bundled
// plugins read, and names older releases read that current NCCL ignores,
// with the last release that read them.
var (
	//go:embed ncclvars/nccl-env-vars.txt
	ncclVarsText string
	//go:embed ncclvars/nccl-env-vars-plugins.txt
	ncclPluginVarsText string
	//go:embed ncclvars/nccl-env-vars-removed.tsv
	ncclRemovedText string
)

// ncclVarsVersion is the NCCL release the embedded lists describe.
const ncclVarsVersion = "2.30.7"

// ncclListName is how findings name the embedded lists: they are gorun's
// knowledge of NCCL, not a reading of the NCCL installed on the node.
const ncclListName = "gorun's list of NCCL variables (from NCCL " + ncclVarsVersion + "'s sources)"

// ncclRemoved explains variables that current NCCL no longer reads, with
// what replaced them (NCCL env.rst). Names only in the embedded removed list
// get a generic explanation.
var ncclRemoved = map[string]string{
	"NCCL_TREE_THRESHOLD":                "removed in NCCL 2.5; NCCL ignores it. To steer the algorithm use NCCL_ALGO (e.g. NCCL_ALGO=Ring or NCCL_ALGO=^Tree), a debugging knob",
	"NCCL_LL_THRESHOLD":                  "removed in NCCL 2.5; NCCL ignores it. To steer the protocol use NCCL_PROTO (e.g. NCCL_PROTO=^LL), a debugging knob",
	"NCCL_SINGLE_RING_THRESHOLD":         "removed in NCCL 2.3; NCCL ignores it. NCCL_ALGO and NCCL_PROTO are the current (debugging) controls",
	"NCCL_IB_CUDA_SUPPORT":               "removed in NCCL 2.4.0; NCCL ignores it. GPUDirect RDMA is controlled by NCCL_NET_GDR_LEVEL (LOC disables it)",
	"NCCL_IB_GDR_LEVEL":                  "renamed NCCL_NET_GDR_LEVEL in NCCL 2.4.0; the old name is ignored",
	"NCCL_THREAD_THRESHOLD":              "last read by NCCL 2.4.8; current NCCL reads NCCL_THREAD_THRESHOLDS instead",
	"NCCL_RINGS":                         "last read by NCCL 2.4.8; NCCL now builds its rings from the topology (NCCL_TOPO_FILE describes a topology)",
	"NCCL_CHECKS_DISABLE":                "deprecated in NCCL 2.2.12 and no longer read; argument checks are controlled by NCCL_CHECK_MODE",
	"NCCL_NCCL_ALLOC_P2P_NET_LL_BUFFERS": "a misspelling NCCL 2.14-2.16 accepted; the name is NCCL_ALLOC_P2P_NET_LL_BUFFERS",
}

// ncclNonexistent are names that circulate in blog posts and scripts but
// no NCCL release ever read (preflight-facts §1.5).
var ncclNonexistent = map[string]string{
	"NCCL_PCIE_DISABLE":      "no NCCL release reads NCCL_PCIE_DISABLE. To cap P2P distance use NCCL_P2P_LEVEL (PIX, PXB, PHB, SYS); to turn P2P off, NCCL_P2P_DISABLE=1 (both debugging knobs)",
	"NCCL_AUTO_DETECT_ORDER": "no NCCL release reads NCCL_AUTO_DETECT_ORDER. NCCL already chooses the algorithm itself whenever NCCL_ALGO is unset",
	"NCCL_SOCKET_TIMEOUT": "no NCCL release reads NCCL_SOCKET_TIMEOUT. What exists: NCCL_SOCKET_RETRY_CNT and NCCL_SOCKET_RETRY_SLEEP_MSEC (2.24), " +
		"NCCL_SOCKET_POLL_TIMEOUT_MSEC (2.28); for InfiniBand, NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT. The collective timeout is init_process_group(timeout=...)",
}

// ncclDeprecated still work but have successors.
var ncclDeprecated = map[string]string{
	"NCCL_MAX_NCHANNELS":  "deprecated since NCCL 2.17 in favour of NCCL_MAX_CTAS",
	"NCCL_MIN_NCHANNELS":  "deprecated since NCCL 2.17 in favour of NCCL_MIN_CTAS",
	"NCCL_MAX_NRINGS":     "the pre-2.5 name of NCCL_MAX_NCHANNELS, itself deprecated for NCCL_MAX_CTAS; ignored when NCCL_MAX_NCHANNELS is set",
	"NCCL_MIN_NRINGS":     "the pre-2.5 name of NCCL_MIN_NCHANNELS, itself deprecated for NCCL_MIN_CTAS; ignored when NCCL_MIN_NCHANNELS is set",
	"NCCL_CHECK_POINTERS": "deprecated since NCCL 2.29.7; use NCCL_CHECK_MODE=DEBUG_LOCAL",
}

// torchNCCLAliases are NCCL_-prefixed names PyTorch (not NCCL) reads as old
// spellings of its TORCH_NCCL_* variables (ProcessGroupNCCL.hpp).
var torchNCCLAliases = map[string]string{
	"NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
	"NCCL_BLOCKING_WAIT":        "TORCH_NCCL_BLOCKING_WAIT",
	"NCCL_DESYNC_DEBUG":         "TORCH_NCCL_DESYNC_DEBUG",
	"NCCL_ENABLE_TIMING":        "TORCH_NCCL_ENABLE_TIMING",
}

// ncclNames is the parsed form of the embedded lists.
type ncclNames struct {
	known   map[string]bool   // read by NCCL or a bundled plugin
	removed map[string]string // name → last release that read it
	sorted  []string          // known names, for suggestions
}

func loadNCCLNames() ncclNames {
	n := ncclNames{known: map[string]bool{}, removed: map[string]string{}}
	for _, text := range []string{ncclVarsText, ncclPluginVarsText} {
		for _, line := range strings.Split(text, "\n") {
			if name := strings.TrimSpace(line); name != "" {
				n.known[name] = true
			}
		}
	}
	for _, line := range strings.Split(ncclRemovedText, "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if f[0] == "" {
			continue
		}
		last := ""
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "last_seen="); ok {
				last = strings.TrimPrefix(v, "v")
			}
		}
		n.removed[f[0]] = last
	}
	for name := range n.known {
		n.sorted = append(n.sorted, name)
	}
	slices.Sort(n.sorted)
	return n
}

// ncclNotSettings are NCCL_* names that describe an installation rather than
// configure NCCL: NVIDIA's container images export NCCL_VERSION (the NCCL the
// image ships, e.g. "2.28.3-1"), build systems the others. Flagging them as
// unknown settings would be noise.
var ncclNotSettings = map[string]bool{
	"NCCL_VERSION": true, "NCCL_HOME": true, "NCCL_ROOT": true, "NCCL_ROOT_DIR": true,
	"NCCL_INCLUDE_DIR": true, "NCCL_LIB_DIR": true,
}

// LintNCCLEnv checks the NCCL_* (and TORCH_NCCL_TIMEOUT) variables of an
// environment: names NCCL does not read (with a "did you mean"), names that
// were removed or never existed (with what to use instead), deprecated
// names, and debugging knobs left set (nccldebug.IsKnob). Valid site
// settings such as NCCL_NVLS_ENABLE=0 or NCCL_SOCKET_IFNAME are never
// flagged; they are listed in one ok finding. Findings come in
// variable-name order. Values in the evidence pass through secret.Redact:
// an NCCL plugin's API key is an NCCL_* variable too.
func LintNCCLEnv(environ map[string]string) []Finding {
	names := loadNCCLNames()
	keys := make([]string, 0, len(environ))
	for k := range environ {
		if strings.HasPrefix(k, "NCCL_") || k == "TORCH_NCCL_TIMEOUT" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)

	var out, debug []Finding
	var fine []string
	for _, k := range keys {
		v := environ[k]
		ev := k + "=" + secret.Redact(k, v)
		warn := func(id, msg, remedy string) {
			out = append(out, Finding{ID: id, Severity: SeverityWarn, Message: msg, Evidence: ev, Remedy: remedy})
		}
		switch {
		case ncclNotSettings[k]:
			continue // set by images and build systems; NCCL never reads them
		case k == "TORCH_NCCL_TIMEOUT":
			warn("torch.env.timeout", "TORCH_NCCL_TIMEOUT does not exist: PyTorch never reads it, so the collective timeout stays at its default (10 minutes for NCCL)",
				"pass the timeout to torch.distributed.init_process_group(timeout=datetime.timedelta(...)) and unset TORCH_NCCL_TIMEOUT")
		case ncclNonexistent[k] != "":
			warn("nccl.env.nonexistent", k+" does not exist: "+ncclNonexistent[k], "unset "+k)
		case ncclRemoved[k] != "" && !names.known[k]:
			warn("nccl.env.removed", k+" is "+ncclRemoved[k], "unset "+k)
		case names.removed[k] != "" && !names.known[k]:
			msg := fmt.Sprintf("%s was last read by NCCL %s; later releases ignore it (%s)", k, names.removed[k], ncclListName)
			remedy := "unset " + k
			if s := suggestNCCL(names, k); s != "" {
				remedy += "; did you mean " + s + "?"
			}
			warn("nccl.env.removed", msg, remedy)
		case torchNCCLAliases[k] != "":
			warn("nccl.env.torch-alias", fmt.Sprintf("%s is read by PyTorch, not NCCL, as the old name of %s", k, torchNCCLAliases[k]),
				fmt.Sprintf("rename it to %s; PyTorch may drop the old name", torchNCCLAliases[k]))
		case !names.known[k]:
			remedy := "check the spelling against the NCCL environment variable documentation, or unset " + k
			if s := suggestNCCL(names, k); s != "" {
				remedy = "did you mean " + s + "? Otherwise unset " + k
			}
			warn("nccl.env.unknown",
				fmt.Sprintf("%s is not in %s (a third-party network or tuner plugin, or a newer NCCL, might read it; if so, ignore this)", k, ncclListName),
				remedy)
		case ncclDeprecated[k] != "":
			warn("nccl.env.deprecated", k+" still works but is "+ncclDeprecated[k], "switch to the new name")
		default:
			fine = append(fine, ev)
		}
		if nccldebug.IsKnob(k) {
			debug = append(debug, Finding{
				ID:       "nccl.env.debug-knob",
				Severity: SeverityWarn,
				Message:  k + " is a debugging knob: fine while chasing a problem, not for production (NCCL documents it under Debugging)",
				Evidence: ev,
				Remedy:   "unset " + k + " once the problem is understood and let NCCL choose",
			})
		}
	}
	out = append(out, debug...)
	if hca, ok := environ["NCCL_IB_HCA"]; ok {
		if f, bad := ibHCAPrefix(hca); bad {
			out = append(out, f)
		}
	}
	if len(fine) > 0 {
		out = append(out, Finding{
			ID:       "nccl.env",
			Severity: SeverityOK,
			Message:  fmt.Sprintf("%d NCCL variables set, all in %s", len(fine), ncclListName),
			Evidence: strings.Join(fine, " "),
		})
	}
	return out
}

// ibHCAPrefix flags an NCCL_IB_HCA list without "=": each entry is then a
// prefix, so mlx5_1 also selects mlx5_10 to mlx5_19.
func ibHCAPrefix(v string) (Finding, bool) {
	list := strings.TrimPrefix(strings.TrimSpace(v), "^")
	if list == "" || strings.HasPrefix(list, "=") {
		return Finding{}, false
	}
	return Finding{
		ID:       "nccl.env.ib-hca-prefix",
		Severity: SeverityWarn,
		Message:  "NCCL_IB_HCA entries without a leading = are prefixes: mlx5_1 also selects mlx5_10 to mlx5_19",
		Evidence: "NCCL_IB_HCA=" + secret.Redact("NCCL_IB_HCA", v),
		Remedy:   "write the list with = for exact names, e.g. NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 (or ^=mlx5_4 to exclude)",
	}, true
}

// suggestNCCL returns the known names nearest to name by edit distance,
// joined with " or ", when they are close enough to be a typo.
func suggestNCCL(n ncclNames, name string) string {
	best := -1
	var near []string
	limit := max(2, len(name)/6)
	for _, k := range n.sorted {
		d := userr.EditDistance(name, k)
		if d > limit {
			continue
		}
		switch {
		case best < 0 || d < best:
			best, near = d, []string{k}
		case d == best:
			near = append(near, k)
		}
	}
	if len(near) > 3 {
		near = near[:3]
	}
	return strings.Join(near, " or ")
}
