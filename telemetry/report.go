package telemetry

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The report's plots are inline SVG written here, with no JavaScript: the
// file opens anywhere, offline, with nothing fetched (its
// Content-Security-Policy forbids fetches), renders the same in every
// browser, and adds no dependency to gorun. A charting library would have
// to be embedded (tens to hundreds of KiB of JS) and kept up to date, for
// plots that are lines over time.

//go:embed report.html.tmpl
var reportFS embed.FS

// reportTmpl is parsed on first use: every gorun process (each worker's
// supervisor among them) would parse it at start-up otherwise.
var reportTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report.html.tmpl").
		Funcs(template.FuncMap{"sub": func(a, b int) int { return a - b }}).
		ParseFS(reportFS, "report.html.tmpl"))
})

// Metrics plotted, in order, with their unit.
var metrics = []struct {
	ID, Title, Unit string
	get             func(*Sample) *float64
}{
	{"sm", "SM utilisation", "%", func(s *Sample) *float64 { return s.SMPct }},
	{"power", "Power", "W", func(s *Sample) *float64 { return s.PowerW }},
	{"clock", "SM clock", "MHz", func(s *Sample) *float64 { return s.SMClockMHz }},
	{"nvlink", "NVLink throughput (rx + tx)", "MB/s", func(s *Sample) *float64 { return sum2(s.NVLinkRxMBps, s.NVLinkTxMBps) }},
	{"pcie", "PCIe throughput (rx + tx)", "MB/s", func(s *Sample) *float64 { return sum2(s.PCIeRxMBps, s.PCIeTxMBps) }},
	{"temp", "Temperature", "°C", func(s *Sample) *float64 { return s.TempC }},
	{"mem", "Memory used", "MiB", func(s *Sample) *float64 { return s.MemUsedMiB }},
}

func sum2(a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	return f64(*a + *b)
}

// maxPoints bounds the points kept per GPU: past it, neighbours are
// averaged in pairs, so a week-long run keeps a report of bounded size.
const maxPoints = 4000

type point struct {
	t time.Time
	v []float64 // per metric; NaN where not reported
}

type series struct {
	key    gpuKey
	ranks  []int
	uuid   string
	points []point
}

// Marker is a moment on the time axis: an attempt's start, a failure.
type Marker struct {
	Time  time.Time
	Label string
	Kind  string // "attempt", "failure", "restart" (its timeline) or "replacement" (a spare's)
}

// Report gathers what the HTML report shows.
type Report struct {
	series   map[gpuKey]*series
	markers  []Marker
	findings []Finding
	notices  []string
	steps    []StepSeries
}

// NewReport returns an empty Report.
func NewReport() *Report { return &Report{series: map[gpuKey]*series{}} }

// Add keeps one sample.
func (r *Report) Add(s Sample) {
	k := gpuKey{s.Node, s.GPU}
	se := r.series[k]
	if se == nil {
		se = &series{key: k}
		r.series[k] = se
	}
	se.ranks, se.uuid = s.Ranks, s.UUID
	p := point{t: s.Time, v: make([]float64, len(metrics))}
	for i, m := range metrics {
		p.v[i] = math.NaN()
		if v := m.get(&s); v != nil {
			p.v[i] = *v
		}
	}
	se.points = append(se.points, p)
	if len(se.points) > maxPoints {
		se.points = halve(se.points)
	}
}

func halve(ps []point) []point {
	out := ps[:0]
	for i := 0; i+1 < len(ps); i += 2 {
		a, b := ps[i], ps[i+1]
		m := point{t: a.t.Add(b.t.Sub(a.t) / 2), v: make([]float64, len(a.v))}
		for j := range a.v {
			switch {
			case math.IsNaN(a.v[j]):
				m.v[j] = b.v[j]
			case math.IsNaN(b.v[j]):
				m.v[j] = a.v[j]
			default:
				m.v[j] = (a.v[j] + b.v[j]) / 2
			}
		}
		out = append(out, m)
	}
	if len(ps)%2 == 1 {
		out = append(out, ps[len(ps)-1])
	}
	return out
}

// Mark puts a marker on the time axis.
func (r *Report) Mark(m Marker) { r.markers = append(r.markers, m) }

// Finding records a straggler or fault finding.
func (r *Report) Finding(f Finding) { r.findings = append(r.findings, f) }

// Notice records a node's notice ("no GPUs to sample: ...").
func (r *Report) Notice(node, text string) { r.notices = append(r.notices, node+": "+text) }

// ReportInfo is the run's context shown beside the plots.
type ReportInfo struct {
	Command    string
	Start, End time.Time
	Result     string // "succeeded after 1 attempt", "failed: ..."
	Preflight  string // the preflight summary, as printed
	Plan       string // the plan, as the table --dry-run prints
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH         = 960, 200
	padL, padR, padT, padB = 70, 20, 14, 28
)

// palette holds distinguishable colours for series; more GPUs reuse them
// with a dash pattern.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

type chartView struct {
	ID, Title, Unit string
	W, H            int
	Empty           bool
	Series          []seriesView
	Bands           []bandView
	Markers         []markerView
	YTicks, XTicks  []tickView
	PlotL, PlotR    int
	PlotT, PlotB    int
}

type seriesView struct {
	Name, Color, Dash, Points, Last string
	N                               int
}

type markerView struct {
	X     float64
	Label string
	Kind  string
}

type tickView struct {
	Pos   float64
	Label string
}

type reportView struct {
	Info     ReportInfo
	Duration string
	GPUs     []gpuView
	Charts   []chartView
	Findings []string
	Notices  []string
	Markers  []Marker
}

type gpuView struct {
	Name, UUID, Ranks, Color string
	Samples                  int
}

// WriteHTML writes the report as one self-contained HTML file.
func (r *Report) WriteHTML(w io.Writer, info ReportInfo) error {
	keys := make([]gpuKey, 0, len(r.series))
	for k := range r.series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].node != keys[j].node {
			return keys[i].node < keys[j].node
		}
		return keys[i].gpu < keys[j].gpu
	})
	t0, t1 := info.Start, info.End
	for _, k := range keys {
		for _, p := range r.series[k].points {
			if t0.IsZero() || p.t.Before(t0) {
				t0 = p.t
			}
			if t1.IsZero() || p.t.After(t1) {
				t1 = p.t
			}
		}
	}
	for _, s := range r.steps {
		if t0.IsZero() || s.T[0].Before(t0) {
			t0 = s.T[0]
		}
		if t1.IsZero() || s.T[len(s.T)-1].After(t1) {
			t1 = s.T[len(s.T)-1]
		}
	}
	if !t1.After(t0) {
		t1 = t0.Add(time.Second)
	}
	markers := slices.Clone(r.markers)
	slices.SortStableFunc(markers, func(a, b Marker) int { return a.Time.Compare(b.Time) })
	v := reportView{Info: info, Duration: t1.Sub(t0).Round(time.Second).String(), Markers: markers, Notices: r.notices}
	for _, f := range r.findings {
		v.Findings = append(v.Findings, f.Time.Format("15:04:05")+" "+f.String())
	}
	for i, k := range keys {
		se := r.series[k]
		v.GPUs = append(v.GPUs, gpuView{Name: fmt.Sprintf("%s gpu%d", k.node, k.gpu), UUID: se.uuid,
			Ranks: strings.TrimSpace(strings.Trim(rankText(se.ranks), " ()")), Color: palette[i%len(palette)], Samples: len(se.points)})
	}
	x := func(t time.Time) float64 {
		return padL + float64(chartW-padL-padR)*t.Sub(t0).Seconds()/t1.Sub(t0).Seconds()
	}
	if c, ok := r.stepChart(t0, t1, x); ok {
		for i := 0; i <= 6; i++ {
			t := t0.Add(time.Duration(float64(t1.Sub(t0)) * float64(i) / 6))
			c.XTicks = append(c.XTicks, tickView{Pos: x(t), Label: t.Sub(t0).Round(time.Second).String()})
		}
		for _, mk := range r.markers {
			c.Markers = append(c.Markers, markerView{X: x(mk.Time), Label: mk.Label, Kind: mk.Kind})
		}
		v.Charts = append(v.Charts, c)
	}
	for mi, m := range metrics {
		c := chartView{ID: m.ID, Title: m.Title, Unit: m.Unit, W: chartW, H: chartH,
			PlotL: padL, PlotR: chartW - padR, PlotT: padT, PlotB: chartH - padB}
		ymax := 0.0
		for _, k := range keys {
			for _, p := range r.series[k].points {
				if !math.IsNaN(p.v[mi]) {
					ymax = math.Max(ymax, p.v[mi])
				}
			}
		}
		if m.ID == "sm" {
			ymax = 100
		}
		ymax = niceMax(ymax)
		y := func(val float64) float64 {
			return float64(chartH-padB) - float64(chartH-padT-padB)*val/ymax
		}
		for i, k := range keys {
			var b strings.Builder
			n := 0
			last := math.NaN()
			for _, p := range r.series[k].points {
				if math.IsNaN(p.v[mi]) {
					continue
				}
				fmt.Fprintf(&b, "%.1f,%.1f ", x(p.t), y(p.v[mi]))
				n++
				last = p.v[mi]
			}
			if n == 0 {
				continue
			}
			dash := ""
			if i >= len(palette) {
				dash = "6 3"
			}
			c.Series = append(c.Series, seriesView{Name: v.GPUs[i].Name, Color: palette[i%len(palette)], Dash: dash,
				Points: strings.TrimSpace(b.String()), N: n, Last: fmt.Sprintf("%.0f %s", last, m.Unit)})
		}
		c.Empty = len(c.Series) == 0
		for i := 0; i <= 4; i++ {
			val := ymax * float64(i) / 4
			c.YTicks = append(c.YTicks, tickView{Pos: y(val), Label: fmt.Sprintf("%.0f", val)})
		}
		for i := 0; i <= 6; i++ {
			t := t0.Add(time.Duration(float64(t1.Sub(t0)) * float64(i) / 6))
			c.XTicks = append(c.XTicks, tickView{Pos: x(t), Label: t.Sub(t0).Round(time.Second).String()})
		}
		for _, mk := range r.markers {
			c.Markers = append(c.Markers, markerView{X: x(mk.Time), Label: mk.Label, Kind: mk.Kind})
		}
		v.Charts = append(v.Charts, c)
	}
	return reportTmpl().Execute(w, v)
}

// niceMax rounds a positive maximum up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
