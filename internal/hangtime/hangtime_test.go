package hangtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestChoose(t *testing.T) {
	const m = time.Minute
	learned := Record{Script: "train.py", World: 6, Runs: []Run{
		{Startup: 20 * time.Second, Longest: 3 * m}, {Startup: 40 * time.Second, Longest: time.Minute}}}
	quick := Record{Script: "train.py", World: 2, Runs: []Run{{Startup: 2 * time.Second, Longest: 500 * time.Millisecond}}}
	tests := []struct {
		name          string
		s             Settings
		rec           Record
		hang, startup time.Duration
		why           string
	}{
		{"off", Settings{Default: 30 * m}, learned, 0, 0, "off"},
		{"given, nothing learned", Settings{Timeout: 5 * time.Second, Floor: 10 * m, Default: 30 * m}, Record{}, 5 * time.Second, 30 * m,
			"a silence of 5s is a hang (--hang-timeout); in start-up, until every worker has made progress once, 30m0s (nothing learned yet)"},
		{"given wins over what was learned", Settings{Timeout: 5 * time.Second, Floor: 10 * m, Default: 30 * m}, learned, 5 * time.Second, 10 * m,
			"10m0s (5 × 40s, the longest silence in 2 runs, is under the floor, --hang-timeout-floor 10m0s)"},
		{"auto, nothing learned", Settings{Auto: true, Floor: 10 * m, Default: 30 * m}, Record{Script: "train.py", World: 6}, 30 * m, 30 * m, "(--hang-timeout auto: nothing learned yet for train.py at world size 6)"},
		{"auto, over the floor", Settings{Auto: true, Floor: 10 * m, Default: 30 * m}, learned, 15 * m, 15 * m,
			"a silence of 15m0s is a hang (--hang-timeout auto: 5 × 3m0s, the longest silence after start-up in 2 runs of train.py at world size 6)"},
		{"auto, under a low floor", Settings{Auto: true, Floor: 5 * time.Second, Default: 30 * m}, quick, 5 * time.Second, 10 * time.Second,
			"5 × 500ms, the longest silence after start-up in 1 run of train.py at world size 2, is under the floor, --hang-timeout-floor 5s); in start-up, until every worker has made progress once, 10s (5 × 2s, the longest silence in 1 run)"},
		{"start-up never under the limit after it", Settings{Timeout: time.Hour, Floor: 10 * m, Default: 30 * m}, quick, time.Hour, time.Hour, "never less than after it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Choose(tt.s, tt.rec)
			if l.Hang != tt.hang || l.Startup != tt.startup || !strings.Contains(l.Why, tt.why) {
				t.Errorf("Choose = %v, %v, %q\nwant %v, %v, with %q", l.Hang, l.Startup, l.Why, tt.hang, tt.startup, tt.why)
			}
		})
	}
}

// TestChooseStep: with --hang-timeout auto and runs that saw steps, a
// span without a step may last Margin times the longest learned, never
// less than twice a silence; a given timeout, or runs with no step,
// leave the rule off.
func TestChooseStep(t *testing.T) {
	const m = time.Minute
	steps := Record{Script: "train.py", World: 2, Runs: []Run{
		{Startup: time.Minute, Longest: 3 * m, Step: 8 * m}, {Startup: time.Minute, Longest: m}}}
	short := Record{Script: "train.py", World: 2, Runs: []Run{{Startup: time.Minute, Longest: 3 * m, Step: 10 * time.Second}}}
	none := Record{Script: "train.py", World: 2, Runs: []Run{{Startup: time.Minute, Longest: 3 * m}}}
	auto := Settings{Auto: true, Floor: 10 * m, Default: 30 * m}
	tests := []struct {
		name string
		s    Settings
		rec  Record
		step time.Duration
		why  string
	}{
		{"learned", auto, steps, 40 * m, "; and 40m0s without a training step, while the workers still print (5 × 8m0s, the longest span without a step in 1 run, never less than twice a silence's)"},
		{"never under twice a silence", auto, short, 30 * m, "; and 30m0s without a training step"},
		{"no run saw steps", auto, none, 0, ""},
		{"a given timeout", Settings{Timeout: time.Hour, Default: 30 * m}, steps, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Choose(tt.s, tt.rec)
			if l.Step != tt.step || !strings.Contains(l.Why, tt.why) || (tt.step == 0) == strings.Contains(l.Why, "training step") {
				t.Errorf("Choose: step %v, %q\nwant %v, with %q", l.Step, l.Why, tt.step, tt.why)
			}
		})
	}
}

func TestTeaches(t *testing.T) {
	tests := []struct {
		name                       string
		startedUp, succeeded, hung bool
		ran                        time.Duration
		want                       bool
	}{
		{"a short success", true, true, false, time.Second, true},
		{"a short failure", true, false, false, time.Minute, false},
		{"a long failure", true, false, false, TeachAfter, true},
		{"a hang", true, false, true, time.Hour, false},
		{"never started up", false, true, false, 0, false},
	}
	for _, tt := range tests {
		if got := Teaches(tt.startedUp, tt.succeeded, tt.hung, tt.ran); got != tt.want {
			t.Errorf("%s: Teaches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRecordFile: a record is saved and loaded whole, keeps the newest
// KeepRuns, starts empty, and a corrupt file says how to start again.
func TestRecordFile(t *testing.T) {
	path := Path(t.TempDir(), Key([]byte("print(1)\n"), 4))
	if !strings.HasSuffix(path, filepath.Join("gorun", "hangtime", Key([]byte("print(1)\n"), 4)+".json")) {
		t.Errorf("path %s", path)
	}
	rec, err := Load(path)
	if err != nil || len(rec.Runs) != 0 {
		t.Fatalf("Load of nothing = %+v, %v", rec, err)
	}
	rec.Script, rec.World = "train.py", 4
	for i := range KeepRuns + 3 {
		rec.Add(Run{Startup: time.Duration(i) * time.Second, Longest: time.Duration(i) * time.Millisecond})
	}
	if err := Save(path, rec); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil || len(got.Runs) != KeepRuns || got.Runs[0].Startup != 3*time.Second || got.World != 4 {
		t.Fatalf("Load = %+v, %v; want the newest %d runs", got, err, KeepRuns)
	}
	if s, l, n := got.Longest(); s != 10*time.Second || l != 10*time.Millisecond || n != KeepRuns {
		t.Errorf("Longest = %v, %v, %d", s, l, n)
	}
	if Key([]byte("print(1)\n"), 4) == Key([]byte("print(2)\n"), 4) || Key([]byte("x"), 4) == Key([]byte("x"), 8) {
		t.Error("keys do not tell scripts or world sizes apart")
	}
	os.WriteFile(path, []byte("{half"), 0o644)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Errorf("a corrupt record: %v", err)
	}
}
