package envplan

import (
	"strings"
	"testing"
)

func TestP2PFaultRule(t *testing.T) {
	faulty := smallFacts(2, "eth0", "10.0.0.2")
	faulty.P2PFaults = []string{"GPU1→GPU0 wrong data"}
	for _, tc := range []struct {
		name     string
		environ  map[string]string
		env      []string
		want     map[string]string // host → NCCL_P2P_DISABLE ("" = unset)
		source   string            // of node b's value
		noteHas  string
		noteNone string
	}{
		{name: "set on the faulty node only",
			want: map[string]string{"a": "", "b": "1"}, source: SourceGorun, noteNone: "NCCL_P2P_DISABLE,"},
		{name: "the user's exported value wins, and the notes say so",
			environ: map[string]string{"NCCL_P2P_DISABLE": "0"},
			want:    map[string]string{"a": "0", "b": "0"}, source: SourceUser,
			noteHas: "NCCL_P2P_DISABLE=0 (exported on the head node) overrides gorun's NCCL_P2P_DISABLE=1 (preflight --bandwidth: P2P between this node's GPUs failed (GPU1→GPU0 wrong data)"},
		{name: "--env wins too", env: []string{"--env", "NCCL_P2P_DISABLE=0"},
			want: map[string]string{"a": "0", "b": "0"}, source: SourceUser, noteHas: "overrides gorun's NCCL_P2P_DISABLE=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := newSpec(append([]string{"--nproc-per-node", "2"}, tc.env...), "train.py")
			spec.Hosts = testHosts("a:2,b:2")
			if tc.environ != nil {
				spec.Environ = tc.environ
			}
			plan, err := Build(spec, Facts{"a": smallFacts(2, "eth0", "10.0.0.1"), "b": faulty})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range plan.Nodes {
				v, set := n.Env["NCCL_P2P_DISABLE"]
				if got := v.Value; got != tc.want[n.Host] || set != (tc.want[n.Host] != "") {
					t.Errorf("%s: NCCL_P2P_DISABLE = %q (set %v), want %q", n.Host, got, set, tc.want[n.Host])
				}
				if n.Host == "b" && v.Source != tc.source {
					t.Errorf("b: source %q, want %q (%s)", v.Source, tc.source, v.Reason)
				}
				if n.Host == "b" && v.Source == SourceGorun && !strings.Contains(v.Reason, "GPU1→GPU0 wrong data") {
					t.Errorf("b: reason %q does not name the pair", v.Reason)
				}
			}
			var notes strings.Builder
			for _, n := range plan.Notes {
				notes.WriteString(n.Message + "\n")
			}
			if tc.noteHas != "" && !strings.Contains(notes.String(), tc.noteHas) {
				t.Errorf("notes lack %q:\n%s", tc.noteHas, notes.String())
			}
			for _, n := range plan.Notes {
				if tc.noteNone != "" && strings.HasPrefix(n.Message, "left to NCCL") && strings.Contains(n.Message, tc.noteNone) {
					t.Errorf("a note still lists NCCL_P2P_DISABLE as left to NCCL: %s", n.Message)
				}
			}
		})
	}
}
