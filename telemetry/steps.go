package telemetry

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// StepSeries is one worker's training steps in one attempt, for the
// report's step chart: its count over time (launch reads it from the
// worker's output).
type StepSeries struct {
	Node      string
	Rank      int
	Attempt   int // from 1
	Straggler bool
	T         []time.Time
	N         []int64
}

// stepBuckets is how many moments the step chart's bands are drawn at:
// about one per 3 pixels of the plot, whatever the number of ranks.
const stepBuckets = 290

// AddSteps keeps one worker's steps.
func (r *Report) AddSteps(s StepSeries) {
	if len(s.T) > 0 && len(s.T) == len(s.N) {
		r.steps = append(r.steps, s)
	}
}

// stepChart is the chart of training steps: per node and attempt, a
// band from the slowest to the fastest of its ranks with their median as
// a line (so 512 ranks draw as many bands as nodes), and each straggler
// alone, dashed; every band and line has at most stepBuckets points.
func (r *Report) stepChart(t0, t1 time.Time, x func(time.Time) float64) (chartView, bool) {
	if len(r.steps) == 0 {
		return chartView{}, false
	}
	c := chartView{ID: "steps", Title: "Training steps (per node: slowest to fastest rank, median line; stragglers dashed)", Unit: "steps",
		W: chartW, H: chartH, PlotL: padL, PlotR: chartW - padR, PlotT: padT, PlotB: chartH - padB}
	ymax := 0.0
	for _, s := range r.steps {
		ymax = math.Max(ymax, float64(s.N[len(s.N)-1]))
	}
	ymax = niceMax(ymax)
	y := func(v float64) float64 { return float64(chartH-padB) - float64(chartH-padT-padB)*v/ymax }
	type group struct {
		node    string
		attempt int
		ranks   []StepSeries
	}
	groups := map[string]*group{}
	var order []string
	nodes := map[string]int{}
	for _, s := range r.steps {
		if _, ok := nodes[s.Node]; !ok {
			nodes[s.Node] = len(nodes)
		}
		k := fmt.Sprintf("%s\x00%d", s.Node, s.Attempt)
		if groups[k] == nil {
			groups[k] = &group{node: s.Node, attempt: s.Attempt}
			order = append(order, k)
		}
		groups[k].ranks = append(groups[k].ranks, s)
	}
	sort.Strings(order)
	for _, k := range order {
		g := groups[k]
		color := palette[nodes[g.node]%len(palette)]
		var lo, hi, mid []string
		n := 0
		for b := 0; b <= stepBuckets; b++ {
			at := t0.Add(time.Duration(float64(t1.Sub(t0)) * float64(b) / stepBuckets))
			var vals []float64
			for _, s := range g.ranks {
				if v, ok := countAt(s, at); ok {
					vals = append(vals, v)
				}
			}
			if len(vals) == 0 {
				continue
			}
			slices.Sort(vals)
			px := x(at)
			lo = append(lo, fmt.Sprintf("%.1f,%.1f", px, y(vals[0])))
			hi = append(hi, fmt.Sprintf("%.1f,%.1f", px, y(vals[len(vals)-1])))
			mid = append(mid, fmt.Sprintf("%.1f,%.1f", px, y(vals[len(vals)/2])))
			n++
		}
		if n == 0 {
			continue
		}
		slices.Reverse(hi)
		name := fmt.Sprintf("%s attempt %d (%d ranks)", g.node, g.attempt, len(g.ranks))
		c.Bands = append(c.Bands, bandView{Name: name, Color: color, Points: strings.Join(append(lo, hi...), " ")})
		last := g.ranks[0].N[len(g.ranks[0].N)-1]
		c.Series = append(c.Series, seriesView{Name: name, Color: color, Points: strings.Join(mid, " "), N: n, Last: fmt.Sprintf("%d steps", last)})
		for _, s := range g.ranks {
			if !s.Straggler {
				continue
			}
			var pts []string
			for b := 0; b <= stepBuckets; b++ {
				at := t0.Add(time.Duration(float64(t1.Sub(t0)) * float64(b) / stepBuckets))
				if v, ok := countAt(s, at); ok {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(at), y(v)))
				}
			}
			c.Series = append(c.Series, seriesView{Name: fmt.Sprintf("%s rank %d (straggler)", s.Node, s.Rank), Color: color, Dash: "6 3",
				Points: strings.Join(pts, " "), N: len(pts), Last: fmt.Sprintf("%d steps", s.N[len(s.N)-1])})
		}
	}
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		c.YTicks = append(c.YTicks, tickView{Pos: y(v), Label: fmt.Sprintf("%.0f", v)})
	}
	return c, true
}

// countAt is s's step count at t: its last point at or before t, while t
// is within its span.
func countAt(s StepSeries, t time.Time) (float64, bool) {
	if t.Before(s.T[0]) || t.After(s.T[len(s.T)-1]) {
		return 0, false
	}
	i := sort.Search(len(s.T), func(i int) bool { return s.T[i].After(t) }) - 1
	return float64(s.N[i]), true
}

type bandView struct {
	Name, Color, Points string
}
