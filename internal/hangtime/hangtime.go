// Package hangtime learns how long a job may be silent: each run of a
// script records the longest silence of its workers (group-wide: no
// worker made progress) in start-up and after it, in a small file keyed
// by the script's content and the world size, and the next run with
// --hang-timeout auto takes Margin times the longest of the recent ones,
// never less than a floor.
package hangtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Margin multiplies the longest silence learned.
const Margin = 5

// KeepRuns is how many runs a record keeps, the newest: the limit follows
// the script as it changes little by little (a change of its text starts
// a new record).
const KeepRuns = 8

// TeachAfter is how long an attempt that did not succeed must have run
// past its start-up to teach: a short failed attempt may not have reached
// the job's quiet phases (evaluation, a checkpoint).
const TeachAfter = 10 * time.Minute

// Run is what one run taught, in nanoseconds in the file.
type Run struct {
	When    time.Time     `json:"when"`
	Startup time.Duration `json:"startup_ns"` // the longest silence in start-up
	Longest time.Duration `json:"longest_ns"` // the longest silence after it
	// Step is the longest span after start-up without a training step,
	// between two (0: the run's output said no steps).
	Step time.Duration `json:"longest_step_ns,omitempty"`
}

// Record is a script's file.
type Record struct {
	Script string `json:"script"` // as given, for the reader
	World  int    `json:"world_size"`
	Runs   []Run  `json:"runs"` // oldest first, at most KeepRuns
}

// Key names the record of a script (its content) at a world size.
func Key(content []byte, world int) string {
	h := sha256.Sum256(content)
	return hex.EncodeToString(h[:8]) + "-w" + strconv.Itoa(world)
}

// Path is where a key's record lives under the user's cache directory.
func Path(cacheDir, key string) string {
	return filepath.Join(cacheDir, "gorun", "hangtime", key+".json")
}

// Load reads a record; one that does not exist yet is empty.
func Load(path string) (Record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, nil
	}
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("%s: %w (delete it to start learning again)", path, err)
	}
	return r, nil
}

// Save writes a record whole (a rename: a reader never sees half of it).
func Save(path string, r Record) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".record-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Add appends a run, keeping the newest KeepRuns.
func (r *Record) Add(run Run) {
	r.Runs = append(r.Runs, run)
	if n := len(r.Runs); n > KeepRuns {
		r.Runs = append(r.Runs[:0], r.Runs[n-KeepRuns:]...)
	}
}

// Longest is the longest silence in start-up and after it over the
// record's runs, and how many runs there are.
func (r Record) Longest() (startup, after time.Duration, runs int) {
	for _, run := range r.Runs {
		startup, after = max(startup, run.Startup), max(after, run.Longest)
	}
	return startup, after, len(r.Runs)
}

// LongestStep is the longest span without a training step over the
// record's runs, and how many runs saw steps; a run that saw none (its
// output says no step gorun reads) teaches nothing of steps.
func (r Record) LongestStep() (step time.Duration, runs int) {
	for _, run := range r.Runs {
		if run.Step > 0 {
			step, runs = max(step, run.Step), runs+1
		}
	}
	return step, runs
}

// Settings are what the command line asks for.
type Settings struct {
	Timeout time.Duration // --hang-timeout; 0 is off
	Auto    bool          // --hang-timeout auto
	Floor   time.Duration // --hang-timeout-floor
	Default time.Duration // the limit before anything is learned
}

// Limits are the limits a run applies, and why, in words.
type Limits struct {
	Hang, Startup time.Duration // 0: off
	// Step is how long the group may go without a training step, though
	// not silent (launch.Options.StepTimeout); 0: off.
	Step time.Duration
	Why  string
}

// Choose turns the settings and what was learned into the run's limits:
// after start-up, an explicit timeout, else (auto) Margin times the
// longest silence learned but at least the floor, else the default; in
// start-up, never less than that, and Margin times the longest start-up
// silence learned (at least the floor), else the default.
func Choose(s Settings, rec Record) Limits {
	if s.Timeout <= 0 && !s.Auto {
		return Limits{Why: "hang detection is off (--hang-timeout 0)"}
	}
	startup, after, runs := rec.Longest()
	var l Limits
	var hangWhy, startWhy string
	switch {
	case !s.Auto:
		l.Hang, hangWhy = s.Timeout, "--hang-timeout"
	case runs == 0:
		l.Hang, hangWhy = s.Default, fmt.Sprintf("--hang-timeout auto: nothing learned yet for %s at world size %d", rec.Script, rec.World)
	default:
		l.Hang, hangWhy = learnedLimit(after, s.Floor)
		hangWhy = fmt.Sprintf("--hang-timeout auto: %s after start-up in %s of %s at world size %d%s",
			hangWhy, plural(runs, "run"), rec.Script, rec.World, floorWords(l.Hang, 5*after, s.Floor))
	}
	switch {
	case runs == 0:
		l.Startup, startWhy = s.Default, "nothing learned yet"
	default:
		l.Startup, startWhy = learnedLimit(startup, s.Floor)
		startWhy = fmt.Sprintf("%s in %s%s", startWhy, plural(runs, "run"), floorWords(l.Startup, 5*startup, s.Floor))
	}
	if l.Startup < l.Hang {
		l.Startup, startWhy = l.Hang, "never less than after it"
	}
	l.Why = fmt.Sprintf("a silence of %v is a hang (%s); in start-up, until every worker has made progress once, %v (%s)",
		l.Hang, hangWhy, l.Startup, startWhy)
	if step, stepRuns := rec.LongestStep(); s.Auto && stepRuns > 0 && l.Hang > 0 {
		// Never less than twice a silence's limit: a phase without
		// steps (an evaluation, a checkpoint) may print, and must not be
		// cut sooner than a silent one; and a group that went silent
		// after its last step is the silence rule's to name.
		learned, rule := learnedLimit(step, s.Floor)
		l.Step = max(learned, 2*l.Hang)
		l.Why += fmt.Sprintf("; and %v without a training step, while the workers still print (%s in %s, never less than twice a silence's)",
			l.Step, strings.Replace(rule, "silence", "span without a step", 1), plural(stepRuns, "run"))
	}
	return l
}

// learnedLimit is Margin times the longest silence, rounded up to the
// second, at least the floor; and the rule in words.
func learnedLimit(longest, floor time.Duration) (time.Duration, string) {
	d := (Margin*longest + time.Second - 1).Truncate(time.Second)
	return max(d, floor), fmt.Sprintf("%d × %v, the longest silence", Margin, longest.Round(time.Millisecond))
}

// floorWords says when the floor is what applies.
func floorWords(limit, learned, floor time.Duration) string {
	if learned < floor && limit == floor {
		return ", is under the floor, --hang-timeout-floor " + floor.String()
	}
	return ""
}

// Teaches reports whether an attempt's silences may be learned: not one
// that ended in a hang; one that succeeded, or ran at least TeachAfter
// past its start-up.
func Teaches(startedUp, succeeded, hung bool, ran time.Duration) bool {
	return startedUp && !hung && (succeeded || ran >= TeachAfter)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
