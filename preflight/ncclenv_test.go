package preflight

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/nccldebug"
)

func TestLintNCCLEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    []string // "severity id" per finding, in order
		contain []string // substrings of the joined findings
	}{
		{name: "empty", env: map[string]string{"PATH": "/usr/bin", "HOME": "/root"}, want: nil},
		{
			name:    "site settings are fine",
			env:     map[string]string{"NCCL_NVLS_ENABLE": "0", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"},
			want:    []string{"ok nccl.env"},
			contain: []string{"4 NCCL variables set, all in gorun's list of NCCL variables", "NCCL_NVLS_ENABLE=0"},
		},
		{
			name:    "tree threshold removed",
			env:     map[string]string{"NCCL_TREE_THRESHOLD": "0"},
			want:    []string{"warn nccl.env.removed"},
			contain: []string{"removed in NCCL 2.5", "NCCL_ALGO=Ring", "NCCL_TREE_THRESHOLD=0"},
		},
		{
			name:    "removed with replacements",
			env:     map[string]string{"NCCL_LL_THRESHOLD": "0", "NCCL_SINGLE_RING_THRESHOLD": "1", "NCCL_IB_CUDA_SUPPORT": "1", "NCCL_IB_GDR_LEVEL": "3"},
			want:    []string{"warn nccl.env.removed", "warn nccl.env.removed", "warn nccl.env.removed", "warn nccl.env.removed"},
			contain: []string{"NCCL_PROTO", "removed in NCCL 2.3", "NCCL_NET_GDR_LEVEL (LOC disables it)", "renamed NCCL_NET_GDR_LEVEL in NCCL 2.4.0"},
		},
		{
			name:    "removed from the embedded list",
			env:     map[string]string{"NCCL_AGG_CHANNEL_SIZE": "1"},
			want:    []string{"warn nccl.env.removed"},
			contain: []string{"last read by NCCL 2.19.4-1; later releases ignore it (gorun's list of NCCL variables"},
		},
		{
			name:    "names that never existed",
			env:     map[string]string{"NCCL_PCIE_DISABLE": "0", "NCCL_AUTO_DETECT_ORDER": "1", "NCCL_SOCKET_TIMEOUT": "600"},
			want:    []string{"warn nccl.env.nonexistent", "warn nccl.env.nonexistent", "warn nccl.env.nonexistent"},
			contain: []string{"NCCL_P2P_LEVEL", "NCCL_ALGO is unset", "NCCL_SOCKET_RETRY_CNT", "NCCL_IB_TIMEOUT"},
		},
		{
			name:    "torch timeout",
			env:     map[string]string{"TORCH_NCCL_TIMEOUT": "1800"},
			want:    []string{"warn torch.env.timeout"},
			contain: []string{"init_process_group(timeout="},
		},
		{
			name:    "typo gets a suggestion",
			env:     map[string]string{"NCCL_SOCKET_IFNAM": "eth0", "NCCL_IB_HCAS": "mlx5"},
			want:    []string{"warn nccl.env.unknown", "warn nccl.env.unknown"},
			contain: []string{"did you mean NCCL_IB_HCA?", "did you mean NCCL_SOCKET_IFNAME?"},
		},
		{
			name:    "unknown without a near name",
			env:     map[string]string{"NCCL_MAKE_IT_FAST": "1"},
			want:    []string{"warn nccl.env.unknown"},
			contain: []string{"NCCL_MAKE_IT_FAST is not in gorun's list of NCCL variables (from NCCL 2.30.7's sources)", "check the spelling"},
		},
		{
			name: "debugging knobs",
			env:  map[string]string{"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_P2P_LEVEL": "NVL", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_PROTO": "Simple", "NCCL_BUFFSIZE": "8388608"},
			want: []string{"warn nccl.env.debug-knob", "warn nccl.env.debug-knob", "warn nccl.env.debug-knob", "warn nccl.env.debug-knob",
				"warn nccl.env.debug-knob", "warn nccl.env.debug-knob", "warn nccl.env.debug-knob", "warn nccl.env.debug-knob", "ok nccl.env"},
			contain: []string{"not for production", "NCCL_ALGO=Ring"},
		},
		{
			name:    "deprecated and a debugging knob",
			env:     map[string]string{"NCCL_MAX_NCHANNELS": "4"},
			want:    []string{"warn nccl.env.deprecated", "warn nccl.env.debug-knob"},
			contain: []string{"NCCL_MAX_CTAS"},
		},
		{
			name:    "pytorch alias",
			env:     map[string]string{"NCCL_ASYNC_ERROR_HANDLING": "1"},
			want:    []string{"warn nccl.env.torch-alias"},
			contain: []string{"TORCH_NCCL_ASYNC_ERROR_HANDLING"},
		},
		{
			name:    "IB_HCA prefix match",
			env:     map[string]string{"NCCL_IB_HCA": "mlx5_1,mlx5_2"},
			want:    []string{"warn nccl.env.ib-hca-prefix", "ok nccl.env"},
			contain: []string{"mlx5_10 to mlx5_19"},
		},
		{
			name: "plugin variables are known",
			env:  map[string]string{"NCCL_INSPECTOR_ENABLE": "1", "NCCL_TUNER_CONFIG_FILE": "/etc/tuner.conf"},
			want: []string{"ok nccl.env"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LintNCCLEnv(tt.env)
			if ids := findingIDs(got); !slices.Equal(ids, tt.want) {
				t.Fatalf("findings %q, want %q\n%+v", ids, tt.want, got)
			}
			var all strings.Builder
			for _, f := range got {
				if f.Message == "" || f.Evidence == "" || (f.Severity != SeverityOK && f.Remedy == "") {
					t.Errorf("incomplete finding %+v", f)
				}
				all.WriteString(f.Message + " | " + f.Evidence + " | " + f.Remedy + "\n")
			}
			for _, s := range tt.contain {
				if !strings.Contains(all.String(), s) {
					t.Errorf("findings lack %q:\n%s", s, all.String())
				}
			}
		})
	}
}

func TestNCCLListsEmbedded(t *testing.T) {
	n := loadNCCLNames()
	if len(n.known) < 200 {
		t.Errorf("only %d known NCCL names embedded", len(n.known))
	}
	for _, name := range []string{"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_DEBUG", "NCCL_INSPECTOR_ENABLE"} {
		if !n.known[name] {
			t.Errorf("%s missing from the embedded lists", name)
		}
	}
	for name := range ncclNonexistent {
		if n.known[name] || n.removed[name] != "" {
			t.Errorf("%s is listed as never existing but the NCCL lists have it", name)
		}
	}
	for _, name := range nccldebug.Knobs() {
		if !n.known[name] {
			t.Errorf("debugging knob %s is not read by NCCL per the embedded list", name)
		}
	}
	if got := n.removed["NCCL_TREE_THRESHOLD"]; got != "2.4.8-1" {
		t.Errorf("NCCL_TREE_THRESHOLD last seen %q, want 2.4.8-1", got)
	}
}

func TestLintNCCLEnvSkipsInstallationLabels(t *testing.T) {
	// NVIDIA's images export NCCL_VERSION; seen on the H200 machines.
	for _, f := range LintNCCLEnv(map[string]string{"NCCL_VERSION": "2.28.3-1", "NCCL_NVLS_ENABLE": "0"}) {
		if f.Severity != SeverityOK || strings.Contains(f.Evidence, "NCCL_VERSION") {
			t.Errorf("finding for an installation label: %+v", f)
		}
	}
}

// TestLintNCCLEnvWording: the lint checks names against gorun's own list,
// taken from one NCCL release; it never read the node's NCCL, so no finding
// may speak for the installed one ("NCCL 2.30.7 does not read ...").
func TestLintNCCLEnvWording(t *testing.T) {
	env := map[string]string{"NCCL_MAKE_IT_FAST": "1", "NCCL_AGG_CHANNEL_SIZE": "1", "NCCL_DEBUG": "INFO"}
	for _, f := range LintNCCLEnv(env) {
		text := f.Message + " " + f.Remedy
		if strings.Contains(text, "NCCL "+ncclVarsVersion+" does not read") || strings.Contains(text, "NCCL "+ncclVarsVersion+" ignores") ||
			strings.Contains(text, "read by NCCL "+ncclVarsVersion) {
			t.Errorf("%s speaks for the installed NCCL: %s", f.ID, f.Message)
		}
		if !strings.Contains(f.Message, "gorun's list of NCCL variables (from NCCL "+ncclVarsVersion+"'s sources)") {
			t.Errorf("%s does not say whose list it is: %s", f.ID, f.Message)
		}
	}
}

// TestLintNCCLEnvHidesSecrets: an NCCL plugin's credentials are NCCL_*
// variables too; neither the text nor the JSON report may show them.
func TestLintNCCLEnvHidesSecrets(t *testing.T) {
	env := map[string]string{
		"NCCL_PLUGIN_API_KEY": "s3cr3t-key",                      // unknown name: a warn finding
		"NCCL_NET_PLUGIN":     "https://u:s3cr3t-pw@plugins.x/a", // known name: the ok finding
		"NCCL_ALGO":           "Ring",                            // a debugging knob, shown
		"NCCL_IB_HCA":         "mlx5_1,token=s3cr3t-t",           // the prefix finding
		"NCCL_IB_PKEY":        "0x8001",                          // a partition key, shown
	}
	fs := LintNCCLEnv(env)
	r := NewReport(nil, fs)
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{text.String(), string(js)} {
		if strings.Contains(out, "s3cr3t") {
			t.Errorf("a secret is shown:\n%s", out)
		}
	}
	var all strings.Builder
	for _, f := range fs {
		all.WriteString(f.Evidence + "\n")
	}
	for _, want := range []string{"NCCL_PLUGIN_API_KEY=<hidden>", "NCCL_NET_PLUGIN=https://u:<hidden>@plugins.x/a", "NCCL_ALGO=Ring", "NCCL_IB_PKEY=0x8001", "token=<hidden>"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("evidence lacks %q:\n%s", want, all.String())
		}
	}
}
