package job

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/envplan"
	"github.com/gorun/gorun/launch"
)

// TestSummarySpares: --summary names each attempt's nodes and every
// replacement, with its reason and what it cost, from the restart's
// timeline, and how many nodes had the next job handed ahead and used it.
func TestSummarySpares(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	s := &summary{path: path, command: []string{"gorun", "x.py"}, start: time.Now()}
	plan := func(hosts ...string) envplan.Plan {
		var p envplan.Plan
		for _, h := range hosts {
			p.Nodes = append(p.Nodes, envplan.NodePlan{Host: h})
		}
		return p
	}
	s.Starting(&Attempt{K: 0, Plan: plan("n0", "n1", "n2")})
	s.AttemptFailed(0, launch.Failure{Node: "n1", Rank: 2, Reason: "exit 13"})
	a := &Attempt{K: 1, Plan: plan("n0", "n3", "n2"),
		Replaced: []replacement{{left: "n1", spare: "n3", rank: 1, why: "torch.found failed", attempt: 1}}}
	s.Starting(a)
	res := launch.Result{Attempts: 2, Restarts: []launch.Restart{{Attempt: 0, Checked: 300 * time.Millisecond, FirstLine: 6 * time.Second, Ahead: 3, AheadUsed: 2}}}
	if err := s.Finish(context.Background(), a, res, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Summary
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if want := [][]string{{"n0", "n1", "n2"}, {"n0", "n3", "n2"}}; len(got.AttemptNodes) != 2 || got.AttemptNodes[1][1] != want[1][1] || got.AttemptNodes[0][1] != want[0][1] {
		t.Errorf("attempt_nodes = %v, want %v", got.AttemptNodes, want)
	}
	if len(got.Restarts) != 1 || got.Restarts[0].AheadNodes != 3 || got.Restarts[0].AheadReleased != 2 {
		t.Errorf("restarts = %+v, want one with ahead_nodes 3, ahead_released 2", got.Restarts)
	}
	want := ReplacementSummary{Attempt: 2, Left: "n1", Spare: "n3", NodeRank: 1, Reason: "torch.found failed", RecheckedMS: 300, FirstLineMS: 6000}
	if len(got.Replacements) != 1 || got.Replacements[0] != want {
		t.Errorf("replacements = %+v, want [%+v]", got.Replacements, want)
	}
}

// TestSummaryHidesSecrets: --summary writes no secret given on the command
// line (an --env value, a token in the script's arguments, a URL's
// password) nor one in a failure's text, as the report does not.
func TestSummaryHidesSecrets(t *testing.T) {
	const token = "hf_abcdefghijklmnopqrstuvwxyz0123456789"
	path := filepath.Join(t.TempDir(), "s.json")
	s := &summary{path: path, start: time.Now(), command: []string{"--env", "HF_TOKEN=" + token, "--env=WANDB_API_KEY=wandb-secret-value",
		"train.py", "--hub-token", token, "--data", "https://user:pa55word@example.com/d"}}
	a := &Attempt{Plan: envplan.Plan{Nodes: []envplan.NodePlan{{Host: "n0"}}}}
	s.Starting(a)
	s.AttemptFailed(0, launch.Failure{Node: "n0", Reason: "exit 1: login failed for " + token})
	if err := s.Finish(context.Background(), a, launch.Result{Attempts: 1}, errors.New("worker said "+token)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{token, "wandb-secret-value", "pa55word"} {
		if strings.Contains(string(b), leak) {
			t.Errorf("the summary holds %q:\n%s", leak, b)
		}
	}
	if !strings.Contains(string(b), `"train.py"`) || !strings.Contains(string(b), "HF_TOKEN=") {
		t.Errorf("the summary lost what is not secret:\n%s", b)
	}
}
