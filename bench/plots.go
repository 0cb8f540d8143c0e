package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The report's plots: TTFT p50 and p95 per step (two panels, log scale),
// hit rate per step with the workload's ideal, output tokens a minute,
// and task completion time p50 and p95 (two panels, log scale). Each arm
// has its own colour and marker (figure.go), the legend sits to the right
// of the data, and times against simulated replicas say so.
func (r *Report) writePlots(dir string) error {
	unit := "seconds"
	if r.simulated() {
		unit = "simulated seconds"
	}
	leg := r.armLegend()

	ttft := r.pairFigure("Time to first token", unit, leg,
		func(x Result) Num { return x.TTFTP50 }, func(x Result) Num { return x.TTFTP95 })

	hits := r.newPlot("Prefix-cache hit rate (replica counters, pooled)", "hit rate")
	hits.Y.Min, hits.Y.Max = 0, 1
	hits.Y.Label.Text = "hit rate (share of prompt tokens cached)"
	hits.Y.Tick.Marker = percentTicks{}
	for i, arm := range r.Arms {
		r.addLine(hits, i, arm, func(x Result) Num { return x.HitRate }, false)
	}
	hitLeg := leg
	if ideal := float64(r.WorkloadIdeal); !math.IsNaN(ideal) && len(r.Steps) > 0 {
		ref := plotter.NewFunction(func(float64) float64 { return ideal })
		ref.Color = color.Gray{Y: 96}
		ref.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		hits.Add(ref)
		hitLeg = append(append(legendEntries(nil), leg...), legendEntry{fmt.Sprintf("ideal %.0f%%", 100*ideal), []plot.Thumbnailer{ref}})
	}

	per := "a minute"
	if r.simulated() {
		per = "a simulated minute"
	}
	tput := r.newPlot("Output tokens "+per, "tokens/min")
	tput.Y.Min = 0
	for i, arm := range r.Arms {
		r.addLine(tput, i, arm, func(x Result) Num { return x.OutputTokensPerMin }, false)
	}
	tput.Y.Max *= 1.08 // the highest point off the frame
	tput.Y.Tick.Marker = plot.TickerFunc(linearTicks)

	task := r.pairFigure("Task completion time", unit, leg,
		func(x Result) Num { return x.TaskP50 }, func(x Result) Num { return x.TaskP95 })

	for name, f := range map[string]*figure{
		PlotTTFT:       ttft,
		PlotHitRate:    {panels: []*plot.Plot{hits}, legend: hitLeg, w: 8 * vg.Inch, h: 4.5 * vg.Inch},
		PlotThroughput: {panels: []*plot.Plot{tput}, legend: leg, w: 8 * vg.Inch, h: 4.5 * vg.Inch},
		PlotTask:       task,
	} {
		if err := f.save(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// simulated says whether the report's times are the simulated replicas'
// (a virtual run, or a real one against replicas run faster than the card).
func (r *Report) simulated() bool { return r.Mode == "virtual" || r.Speed > 1 }

// pairFigure draws one metric's p50 and p95 per step in two panels side
// by side (log scale when there is a positive value), so that each arm's
// two lines never cross the other's: with nine policies one panel of 18
// lines could not be read.
func (r *Report) pairFigure(title, unit string, leg legendEntries, p50, p95 func(Result) Num) *figure {
	f := &figure{legend: leg, w: 11 * vg.Inch, h: 4.5 * vg.Inch}
	for _, q := range []struct {
		name string
		get  func(Result) Num
	}{{"p50", p50}, {"p95", p95}} {
		name := q.name
		if strings.HasPrefix(title, "Task") {
			name += " (sessions that finished)"
		}
		p := r.newPlot(title+", "+name, unit)
		if r.anyPositive(q.get) {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = logTicks{}
			p.Y.Label.Text = unit + " (log scale)"
		} else { // a log axis without a point cannot be drawn
			p.Title.Text = title + ", " + name + ": no value"
		}
		for i, arm := range r.Arms {
			r.addLine(p, i, arm, q.get, p.Y.Scale != nil)
		}
		if _, log := p.Y.Scale.(plot.LogScale); log && p.Y.Min > 0 {
			// a quarter of a decade's room, so that the extreme points
			// are not on the frame and a labelled tick falls near them
			p.Y.Min, p.Y.Max = p.Y.Min/1.4, p.Y.Max*1.4
		}
		f.panels = append(f.panels, p)
	}
	return f
}

// armLegend is one entry per arm: its colour, its marker, and the line.
func (r *Report) armLegend() legendEntries {
	var out legendEntries
	for i, arm := range r.Arms {
		l, s := armStyle(i)
		out = append(out, legendEntry{arm, []plot.Thumbnailer{l, s}})
	}
	return out
}

// armStyle is arm i's line and marker.
func armStyle(i int) (*plotter.Line, *plotter.Scatter) {
	l := &plotter.Line{LineStyle: draw.LineStyle{Color: seriesColor(i), Width: vg.Points(1.6), Dashes: seriesDashes(i)}}
	s := &plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: seriesColor(i), Radius: vg.Points(3.2), Shape: seriesGlyph(i)}}
	return l, s
}

func (r *Report) newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = r.stepAxis()
	p.Y.Label.Text = ylabel
	ticks := make([]plot.Tick, len(r.Steps))
	for i, s := range r.Steps {
		ticks[i] = plot.Tick{Value: s.value(), Label: s.String()}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(r.Steps) > 0 {
		p.X.Min, p.X.Max = math.Inf(1), math.Inf(-1)
		for _, s := range r.Steps {
			p.X.Min, p.X.Max = min(p.X.Min, s.value()), max(p.X.Max, s.value())
		}
		if p.X.Min == p.X.Max {
			p.X.Min, p.X.Max = p.X.Min-1, p.X.Max+1
		}
		// room for the markers at both ends
		pad := (p.X.Max - p.X.Min) * 0.04
		p.X.Min, p.X.Max = p.X.Min-pad, p.X.Max+pad
	}
	p.Add(grid())
	return p
}

// addLine plots one metric of arm i across the steps, skipping steps
// without data (and non-positive values on a log scale).
func (r *Report) addLine(p *plot.Plot, i int, arm string, get func(Result) Num, logScale bool) {
	var pts plotter.XYs
	for _, s := range r.Steps {
		x, ok := r.FindStep(s, arm)
		if !ok {
			continue
		}
		v := float64(get(x))
		if math.IsNaN(v) || (logScale && v <= 0) {
			continue
		}
		pts = append(pts, plotter.XY{X: s.value(), Y: v})
	}
	if len(pts) == 0 {
		return
	}
	l, s := armStyle(i)
	l.XYs, s.XYs = pts, pts
	p.Add(l, s)
}

// anyPositive says whether some result has a positive value of get.
func (r *Report) anyPositive(get func(Result) Num) bool {
	for _, x := range r.Results {
		if v := float64(get(x)); v > 0 && !math.IsNaN(v) {
			return true
		}
	}
	return false
}

// stepAxis names the x axis by the first step's kind.
func (r *Report) stepAxis() string {
	switch {
	case len(r.Steps) == 0:
		return ""
	case r.Steps[0].CacheLoad > 0:
		return "load (live context ÷ total KV cache)"
	case r.Steps[0].Open():
		if r.simulated() {
			return "new sessions a simulated minute"
		}
		return "new sessions a minute"
	}
	return "concurrent sessions"
}
