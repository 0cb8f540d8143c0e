package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// PoolSlowTTFT is the TTFT past which a turn counts as slow in the
// pooled table ("turns > 20 s a seed"): the tail the p99 summarizes, as a
// count a reader can compare across groups.
const PoolSlowTTFT = 20.0

// DefaultPoolBoot is how many bootstrap resamples of the seeds a row gets.
const DefaultPoolBoot = 1000

// PoolInterval is a ratio to the baseline: its value on the seeds both
// groups have, and the 5th and 95th percentiles of the bootstrap over
// those seeds (a 90% interval). Seeds is how many seeds were paired.
type PoolInterval struct {
	Point, Lo, Hi float64
	Seeds         int
}

func (v PoolInterval) String() string {
	if v.Seeds == 0 || math.IsNaN(v.Point) {
		return "-"
	}
	return fmt.Sprintf("%.2f [%.2f, %.2f]", v.Point, v.Lo, v.Hi)
}

// PoolRow is one group's numbers at one step, every seed's measured turns
// pooled.
type PoolRow struct {
	Label                string
	Seeds                int
	TTFTP50, TTFTP95     float64
	TTFTP99              float64
	SlowPerSeed          float64 // turns with TTFT over PoolSlowTTFT, per seed
	TurnP50, TurnP95     float64 // completion: done - sent
	OutputPerMin         float64 // per seed
	HitRate              float64 // cached / prompt tokens
	SubagentLaterCached  float64 // the same of subagents' later turns
	ParkedShare          float64 // turns that waited at the warden
	Baseline             bool
	TTFTP95Ratio, Output PoolInterval // to the baseline; zero on its own row
}

// pooled concatenates the turns of a step over the seeds given (a seed
// given twice counts twice, as a bootstrap resample needs).
func (g *PoolGroup) pooled(step string, seeds []uint64) PoolTurns {
	var t PoolTurns
	for _, s := range seeds {
		x := g.Runs[s].Steps[step]
		t.TTFT = append(t.TTFT, x.TTFT...)
		t.Completion = append(t.Completion, x.Completion...)
		t.Turns += x.Turns
		t.Parked += x.Parked
		t.Output += x.Output
		t.Prompt += x.Prompt
		t.Cached += x.Cached
		t.SubPrompt += x.SubPrompt
		t.SubCached += x.SubCached
	}
	return t
}

// Rows computes one step's table; baseline names the group the others are
// divided by, boot the bootstrap's resamples.
func (p *Pool) Rows(step, baseline string, boot int) ([]PoolRow, error) {
	base := p.group(baseline)
	if base == nil {
		return nil, fmt.Errorf("%w: --baseline %q is no group's label (%s)", ErrBadConfig, baseline, strings.Join(p.labels(), ", "))
	}
	minutes := p.Config.StepSeconds / 60
	var rows []PoolRow
	for _, g := range p.Groups {
		seeds := g.Seeds()
		t := g.pooled(step, seeds)
		slices.Sort(t.TTFT)
		slices.Sort(t.Completion)
		slow := len(t.TTFT) - sortedAtMost(t.TTFT, PoolSlowTTFT)
		n := float64(len(seeds))
		row := PoolRow{
			Label: g.Label, Seeds: len(seeds), Baseline: g == base,
			TTFTP50: pct(t.TTFT, 50), TTFTP95: pct(t.TTFT, 95), TTFTP99: pct(t.TTFT, 99),
			SlowPerSeed: float64(slow) / n,
			TurnP50:     pct(t.Completion, 50), TurnP95: pct(t.Completion, 95),
			OutputPerMin:        float64(t.Output) / n / minutes,
			HitRate:             ratio(t.Cached, t.Prompt),
			SubagentLaterCached: ratio(t.SubCached, t.SubPrompt),
			ParkedShare:         float64(t.Parked) / float64(max(t.Turns, 1)),
		}
		if g != base {
			row.TTFTP95Ratio, row.Output = bootRatios(base, g, step, boot)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// pct is Percentile of an already sorted slice (NaN when empty).
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return percentileSorted(sorted, p)
}

// sortedAtMost is how many of the sorted xs are <= v.
func sortedAtMost(xs []float64, v float64) int {
	i, _ := slices.BinarySearchFunc(xs, v, func(x, v float64) int {
		if x <= v {
			return -1
		}
		return 1
	})
	return i
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func (p *Pool) group(label string) *PoolGroup {
	for _, g := range p.Groups {
		if g.Label == label {
			return g
		}
	}
	return nil
}

func (p *Pool) labels() []string {
	var out []string
	for _, g := range p.Groups {
		out = append(out, g.Label)
	}
	return out
}

// WriteTable prints one markdown table a step: a line saying what was
// pooled, then one row a group. baseline "" is the first group.
func (p *Pool) WriteTable(w io.Writer, baseline string, boot int) error {
	if baseline == "" {
		baseline = p.Groups[0].Label
	}
	var b strings.Builder
	c := p.Config
	for _, step := range c.Steps {
		rows, err := p.Rows(step, baseline, boot)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "### %s%s\n\n", step, p.sized(step))
		fmt.Fprintf(&b, "%d replicas, profile %s, workload %s, %g-minute windows; every measured turn of every seed pooled (nearest-rank percentiles); "+
			"ratios to %s on the seeds both have, [5th, 95th] percentile of %d bootstrap resamples of those seeds.\n\n",
			c.Replicas, c.Profile, c.Workload, c.StepSeconds/60, baseline, boot)
		b.WriteString("| group | seeds | TTFT p50 | TTFT p95 | TTFT p99 | turns > 20 s a seed | turn p50 | turn p95 | output tokens a minute | hit rate | subagents' later cached | waited at warden | TTFT p95 × baseline | output × baseline |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
		for _, r := range rows {
			p95, out := r.TTFTP95Ratio.String(), r.Output.String()
			if r.Baseline {
				p95, out = "baseline", "baseline"
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.1f | %s | %s | %.0f | %s | %s | %s | %s | %s |\n",
				r.Label, r.Seeds, fmtSec(Num(r.TTFTP50)), fmtSec(Num(r.TTFTP95)), fmtSec(Num(r.TTFTP99)), r.SlowPerSeed,
				fmtSec(Num(r.TurnP50)), fmtSec(Num(r.TurnP95)), r.OutputPerMin,
				fmtPct1(Num(r.HitRate)), fmtPct1(Num(r.SubagentLaterCached)), fmtPct1(Num(r.ParkedShare)), p95, out)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sized says how the runs sized a step stated as a load: " (23-27
// sessions)"; "" for any other step, whose label holds its size.
func (p *Pool) sized(step string) string {
	lo, hi := math.MaxInt, 0
	for _, g := range p.Groups {
		for _, r := range g.Runs {
			if t := r.Steps[step]; t != nil && t.Step.CacheLoad > 0 && t.Step.ReplaySpeed == 0 {
				n := t.Step.Sessions
				if t.Step.Open() {
					n = 0 // an open loop's rate varies by seed too; not summed up here
				}
				lo, hi = min(lo, n), max(hi, n)
			}
		}
	}
	switch {
	case hi == 0:
		return ""
	case lo == hi:
		return fmt.Sprintf(" (%d sessions)", lo)
	default:
		return fmt.Sprintf(" (%d-%d sessions)", lo, hi)
	}
}
