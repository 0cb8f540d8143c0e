package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WriteSummary prints, per window, what the overload study needs: where
// requests waited, what they recomputed, and how a request's turn and
// replica relate to its time to first token.
func (t *TraceRecorder) WriteSummary(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| sessions | arm | requests | first turns | TTFT p50 first / later | p50 / p95 with cut (lower bound) | cut (parked) | parked p50 | recomputed tok/req | spilled/moved | preempted | mean running/waiting per replica | answered per replica |\n")
	b.WriteString("|---:|---|---:|---:|---|---|---|---|---:|---:|---:|---|---|\n")
	for _, win := range t.Windows {
		s := win.summarize()
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s / %s | %s / %s | %d (%d) | %s | %.0f | %d | %d | %s | %s |\n",
			win.Step, win.Arm, s.requests, s.first, fmtSec(Num(s.firstP50)), fmtSec(Num(s.laterP50)),
			fmtSec(Num(s.cutP50)), fmtSec(Num(s.cutP95)), s.cut, s.cutParked, fmtSec(Num(s.parkedP50)),
			s.recomputed, s.moved, s.preempted, s.queues, s.answered)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

type windowSummary struct {
	requests, first, moved int
	firstP50, laterP50     float64
	cutP50, cutP95         float64 // answered and cut together, cut at their lower bound
	cut, cutParked         int
	parkedP50              float64 // wait at the warden of the requests that were parked
	recomputed             float64
	preempted              uint64
	queues, answered       string
}

func (win *TraceWindow) summarize() windowSummary {
	var s windowSummary
	var first, later []float64
	var recomputed float64
	replicas := 0
	for _, p := range win.Polls {
		replicas = max(replicas, p.Replica+1)
	}
	for _, r := range win.Requests {
		replicas = max(replicas, r.Replica+1)
	}
	answered := make([]int, replicas)
	last := map[string]int{}
	var all, parked []float64
	for _, r := range win.Requests {
		all = append(all, r.TTFT)
		if r.Parked > 0.001 {
			parked = append(parked, r.Parked)
		}
		if r.Cut {
			s.cut++
			if r.Kind == "parked" {
				s.cutParked++
			}
			continue
		}
		s.requests++
		if r.Turn == 0 {
			s.first++
			first = append(first, r.TTFT)
		} else {
			later = append(later, r.TTFT)
		}
		if r.Kind == "spilled" {
			s.moved++
		} else if prev, ok := last[r.Session]; ok && prev != r.Replica {
			s.moved++
		}
		last[r.Session] = r.Replica
		recomputed += float64(r.Prompt - r.Cached)
		if r.Replica >= 0 {
			answered[r.Replica]++
		}
	}
	s.firstP50, s.laterP50 = Percentile(first, 50), Percentile(later, 50)
	s.cutP50, s.cutP95, s.parkedP50 = Percentile(all, 50), Percentile(all, 95), Percentile(parked, 50)
	if s.requests > 0 {
		s.recomputed = recomputed / float64(s.requests)
	}
	run, wait, n := make([]float64, replicas), make([]float64, replicas), make([]float64, replicas)
	firstPre, lastPre := make([]uint64, replicas), make([]uint64, replicas)
	seen := make([]bool, replicas)
	for _, p := range win.Polls {
		run[p.Replica] += float64(p.Running)
		wait[p.Replica] += float64(p.Waiting)
		n[p.Replica]++
		if !seen[p.Replica] {
			firstPre[p.Replica], seen[p.Replica] = p.Preemptions, true
		}
		lastPre[p.Replica] = p.Preemptions
	}
	var q, a []string
	for i := range replicas {
		if n[i] > 0 {
			q = append(q, fmt.Sprintf("%.1f/%.1f", run[i]/n[i], wait[i]/n[i]))
		}
		s.preempted += lastPre[i] - firstPre[i]
		a = append(a, fmt.Sprint(answered[i]))
	}
	s.queues, s.answered = strings.Join(q, " "), strings.Join(a, "/")
	return s
}

// PlotQueues draws the requests waiting in each replica over a window (running+waiting is flat at the sessions per replica in a closed loop, so the split is what tells).
func (win *TraceWindow) PlotQueues(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s: requests waiting in each replica (vLLM queue)", win.Arm, win.phrase())
	p.X.Label.Text = "simulated seconds into the window"
	p.Y.Label.Text = "requests"
	p.Add(grid())
	var leg legendEntries
	// one point per replica every queueEvery seconds keeps the SVG small
	const queueEvery = 2.0
	by := map[int]plotter.XYs{}
	for _, q := range win.Polls {
		pts := by[q.Replica]
		if n := len(pts); n > 0 && q.At-pts[n-1].X < queueEvery {
			continue
		}
		by[q.Replica] = append(pts, plotter.XY{X: q.At, Y: float64(q.Waiting)})
	}
	keys := make([]int, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		l, err := plotter.NewLine(by[k])
		if err != nil {
			return err
		}
		l.Color, l.Width, l.Dashes = seriesColor(k), vg.Points(1.4), seriesDashes(k)
		p.Add(l)
		leg = append(leg, legendEntry{fmt.Sprintf("replica %d", k), []plot.Thumbnailer{l}})
	}
	p.Y.Min = 0
	f := &figure{panels: []*plot.Plot{p}, legend: leg, w: 7 * vg.Inch, h: 3 * vg.Inch}
	return f.save(path)
}

// PlotTTFT draws every answered request's time to first token against the
// time it was sent, first turns apart from later ones.
func (win *TraceWindow) PlotTTFT(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s: time to first token of each request", win.Arm, win.phrase())
	p.X.Label.Text = "sent at, simulated seconds into the window"
	p.Y.Label.Text = "TTFT, simulated seconds"
	p.Add(grid())
	var leg legendEntries
	var firsts, laters plotter.XYs
	for _, r := range win.Requests {
		if math.IsNaN(r.TTFT) {
			continue
		}
		pt := plotter.XY{X: r.Sent.Sub(win.Start).Seconds(), Y: r.TTFT}
		if r.Turn == 0 {
			firsts = append(firsts, pt)
		} else {
			laters = append(laters, pt)
		}
	}
	for i, set := range []struct {
		name string
		pts  plotter.XYs
	}{{"first turn", firsts}, {"later turn", laters}} {
		if len(set.pts) == 0 {
			continue
		}
		s, err := plotter.NewScatter(set.pts)
		if err != nil {
			return err
		}
		s.Color, s.Shape = seriesColor(i), seriesGlyph(i)
		s.Radius = vg.Points(2)
		p.Add(s)
		leg = append(leg, legendEntry{set.name, []plot.Thumbnailer{s}})
	}
	p.Y.Min = 0
	f := &figure{panels: []*plot.Plot{p}, legend: leg, w: 7 * vg.Inch, h: 3 * vg.Inch}
	return f.save(path)
}

// Trace summary file written by WriteAll, beside the CSVs and the plots
// queues_<sessions>_<arm>.svg and ttft_<sessions>_<arm>.svg.
const TraceSummary = "trace.md"

// WriteAll writes the CSVs, the summary table and two plots per window.
func (t *TraceRecorder) WriteAll(dir string) error {
	if err := t.Write(dir); err != nil {
		return err
	}
	var b strings.Builder
	if err := t.WriteSummary(&b); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, TraceSummary), []byte(b.String()), 0o644); err != nil {
		return err
	}
	for _, win := range t.Windows {
		name := fmt.Sprintf("%s_%s.svg", win.fileLabel(), win.Arm)
		if err := win.PlotQueues(filepath.Join(dir, "queues_"+name)); err != nil {
			return err
		}
		if err := win.PlotTTFT(filepath.Join(dir, "ttft_"+name)); err != nil {
			return err
		}
	}
	return nil
}
