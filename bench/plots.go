package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const plotW, plotH = 7 * vg.Inch, 4.5 * vg.Inch

// writePlots draws the four SVGs: TTFT p50/p95 per step (log scale), hit
// rate per step with the ideal as a reference line, output tokens a minute,
// task completion time p50/p95 (log scale).
func (r *Report) writePlots(dir string) error {
	ttft := r.newPlot("Time to first token", "seconds (log scale)")
	if r.anyPositive(func(x Result) Num { return x.TTFTP50 }) {
		ttft.Y.Scale = plot.LogScale{}
		ttft.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	} else { // a log axis without a point cannot be drawn
		ttft.Title.Text = "Time to first token: no request answered within a window"
		ttft.Y.Label.Text = "seconds"
	}
	for i, arm := range r.Arms {
		if err := r.addLine(ttft, i, arm+" p50", arm, func(x Result) Num { return x.TTFTP50 }, nil, true); err != nil {
			return err
		}
		if err := r.addLine(ttft, i, arm+" p95", arm, func(x Result) Num { return x.TTFTP95 }, []vg.Length{vg.Points(6), vg.Points(3)}, true); err != nil {
			return err
		}
	}

	hits := r.newPlot("Prefix-cache hit rate (replica counters, pooled)", "hit rate")
	hits.Legend.Top = false // the lines fall with load: the bottom left is free
	hits.Legend.YOffs = vg.Points(36)
	hits.Y.Min, hits.Y.Max = 0, 1
	for i, arm := range r.Arms {
		if err := r.addLine(hits, i, arm, arm, func(x Result) Num { return x.HitRate }, nil, false); err != nil {
			return err
		}
	}
	if ideal := float64(r.WorkloadIdeal); !math.IsNaN(ideal) && len(r.Steps) > 0 {
		ref := plotter.NewFunction(func(float64) float64 { return ideal })
		ref.Color = color.Gray{Y: 96}
		ref.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		hits.Add(ref)
		hits.Legend.Add(fmt.Sprintf("ideal %.0f%%", 100*ideal), ref)
	}

	tput := r.newPlot("Output tokens a minute", "tokens/min")
	tput.Y.Min = 0
	tput.Legend.Top, tput.Legend.Left = false, false // rising lines: the bottom right is free
	tput.Legend.XOffs, tput.Legend.YOffs = -vg.Points(12), vg.Points(36)
	for i, arm := range r.Arms {
		if err := r.addLine(tput, i, arm, arm, func(x Result) Num { return x.OutputTokensPerMin }, nil, false); err != nil {
			return err
		}
	}

	task := r.newPlot("Task completion time (sessions that finished in the window)", "seconds (log scale)")
	if r.anyPositive(func(x Result) Num { return x.TaskP50 }) {
		task.Y.Scale = plot.LogScale{}
		task.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	} else { // a log axis without a point cannot be drawn
		task.Title.Text = "Task completion time: no session finished within a window"
		task.Y.Label.Text = "seconds"
	}
	for i, arm := range r.Arms {
		if err := r.addLine(task, i, arm+" p50", arm, func(x Result) Num { return x.TaskP50 }, nil, true); err != nil {
			return err
		}
		if err := r.addLine(task, i, arm+" p95", arm, func(x Result) Num { return x.TaskP95 }, []vg.Length{vg.Points(6), vg.Points(3)}, true); err != nil {
			return err
		}
	}

	for name, p := range map[string]*plot.Plot{PlotTTFT: ttft, PlotHitRate: hits, PlotThroughput: tput, PlotTask: task} {
		if err := p.Save(plotW, plotH, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (r *Report) newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = r.stepAxis()
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(36)  // clear of the Y axis
	p.Legend.YOffs = -vg.Points(18) // clear of the title
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
	}
	p.Add(plotter.NewGrid())
	return p
}

// addLine plots one metric of one arm across the steps, skipping steps
// without data (and non-positive values on a log scale).
func (r *Report) addLine(p *plot.Plot, i int, label, arm string, get func(Result) Num, dashes []vg.Length, logScale bool) error {
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
		return nil
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Dashes = dashes
	s.Color = plotutil.Color(i)
	s.Shape = draw.CircleGlyph{}
	p.Add(l, s)
	p.Legend.Add(label, l, s)
	return nil
}

// anyPositive says whether some result has a positive value of f, which a
// log axis needs.
func (r *Report) anyPositive(f func(Result) Num) bool {
	for _, x := range r.Results {
		if v := float64(f(x)); v > 0 && !math.IsNaN(v) {
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
		return "new sessions a minute"
	}
	return "concurrent sessions"
}
