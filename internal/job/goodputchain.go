package job

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// A chain is the runs of one job that its scheduler started again: a
// Slurm job requeued (the same SLURM_JOB_ID), or runs that share an
// --rdzv-id the user gave. Each run's goodput is kept under the user's
// cache (runs/CHAIN.jsonl, a line per run), and the summary adds up the
// chain's: the time a requeued job waited in the queue is no run's, and
// is not counted.

// ChainGoodput is the goodput of every run of a chain so far, this one
// included.
type ChainGoodput struct {
	Key         string        `json:"key"` // "slurm-JOBID" or "rdzv-ID"
	Runs        int           `json:"runs"`
	WallSeconds float64       `json:"wall_seconds"`
	Goodput     float64       `json:"goodput"`
	Parts       []GoodputPart `json:"parts"`
}

// chainRecord is one run's line in the chain's file.
type chainRecord struct {
	RunID       string             `json:"run_id"`
	Host        string             `json:"host"`
	WallSeconds float64            `json:"wall_seconds"`
	Parts       map[string]float64 `json:"parts"` // key → seconds
}

// chainKey is the chain a run belongs to: its Slurm job, else the
// --rdzv-id the user gave; "" for none.
func chainKey(getenv func(string) string, rdzvID string, rdzvSet bool) string {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	safe := regexp.MustCompile(`[^A-Za-z0-9_.-]`)
	switch {
	case getenv("SLURM_JOB_ID") != "":
		return "slurm-" + safe.ReplaceAllString(getenv("SLURM_JOB_ID"), "_")
	case rdzvSet && rdzvID != "" && rdzvID != "none":
		return "rdzv-" + safe.ReplaceAllString(rdzvID, "_")
	}
	return ""
}

// addToChain records g as run runID's in the chain's file under dir, and
// returns the chain's goodput, every run recorded so far.
func addToChain(dir, key, runID string, g Goodput) (*ChainGoodput, error) {
	if key == "" || !g.Known {
		return nil, nil
	}
	host, _ := os.Hostname()
	rec := chainRecord{RunID: runID, Host: host, WallSeconds: g.WallSeconds, Parts: map[string]float64{}}
	for _, p := range g.Parts {
		rec.Parts[p.Key] = p.Seconds
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, key+".jsonl")
	line, _ := json.Marshal(rec)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	_, werr := f.Write(append(line, '\n')) // one write: runs that end together do not mix their lines
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &ChainGoodput{Key: key}
	sums := map[string]float64{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r chainRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil || seen[r.RunID+" "+r.Host] {
			continue
		}
		seen[r.RunID+" "+r.Host] = true
		c.Runs++
		c.WallSeconds += r.WallSeconds
		for k, v := range r.Parts {
			sums[k] += v
		}
	}
	c.Parts, c.Goodput = partsOf(sums, c.WallSeconds)
	return c, nil
}

// Line says the chain's goodput, where it has more than one run.
func (c *ChainGoodput) Line() string {
	if c == nil || c.Runs < 2 {
		return ""
	}
	return fmt.Sprintf("gorun: goodput of the %d runs of %s so far: %.1f%% of %.0fs of running (time in the queue aside)", c.Runs, c.Key, 100*c.Goodput, c.WallSeconds)
}
