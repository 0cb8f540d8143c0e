package bench

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// What the Claude Code workload generated, beside what was published
// (docs/workload.md): collected from the requests a window answered, or
// from sessions played on paper (`--describe`).

// ccStats collects a window's (or a paper run's) quantities.
type ccStats struct {
	mu                  sync.Mutex
	input, growth, gaps []float64 // main-agent requests: prompt tokens, growth over the turn before, pause before
	output              []float64 // main-agent requests' generated tokens
	turns               []float64 // main-agent turns of each finished session
	groups              []float64 // subagents a group
	main, agents        int       // requests answered
	resets, compactions int       // main-agent turns that start over, compaction requests
}

// answered records an answered request of conversation cv.
func (c *ccStats) answered(f *flowSend, a flowAnswer, cv *ccConv, agent bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if agent {
		c.agents++
		return
	}
	c.main++
	if f.Compaction {
		c.compactions++
		cv.lastSent = 0
		return
	}
	c.input = append(c.input, float64(a.Prompt))
	c.output = append(c.output, float64(a.Output))
	if !f.Fresh && cv.lastSent > 0 {
		c.growth = append(c.growth, float64(a.Prompt-cv.lastSent))
	}
	cv.lastSent = a.Prompt
}

func (c *ccStats) gap(d time.Duration) {
	if c != nil {
		c.mu.Lock()
		c.gaps = append(c.gaps, d.Seconds())
		c.mu.Unlock()
	}
}

func (c *ccStats) reset() {
	if c != nil {
		c.mu.Lock()
		c.resets++
		c.mu.Unlock()
	}
}

func (c *ccStats) group(n int) {
	if c != nil {
		c.mu.Lock()
		c.groups = append(c.groups, float64(n))
		c.mu.Unlock()
	}
}

func (c *ccStats) sessionDone(turns int) {
	if c != nil {
		c.mu.Lock()
		c.turns = append(c.turns, float64(turns))
		c.mu.Unlock()
	}
}

// CCQuantity is one quantity as generated and as published.
type CCQuantity struct {
	Name      string `json:"name"`
	N         int    `json:"n"`         // values generated
	Generated [3]Num `json:"generated"` // p50, p90, p99
	Published [3]Num `json:"published"` // NaN: not published
	Note      string `json:"note,omitempty"`
}

// CCReport is what the workload generated, quantity by quantity.
type CCReport struct {
	Quantities []CCQuantity `json:"quantities"`
	// AgentShare is the subagents' share of requests (published 51.7%);
	// ResetShare and CompactionShare the main agent's turns that started
	// over and the compaction requests among its requests.
	AgentShare      Num `json:"agent_request_share"`
	ResetShare      Num `json:"reset_share"`
	CompactionShare Num `json:"compaction_share"`
}

// report summarizes the stats; limit is the model's context (where the
// input sizes stop).
func (c *ccStats) report(limit int) *CCReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	pct := func(xs []float64) [3]Num {
		return [3]Num{Num(Percentile(xs, 50)), Num(Percentile(xs, 90)), Num(Percentile(xs, 99))}
	}
	nan := Num(math.NaN())
	pub := func(d quantileDist) [3]Num {
		p := [3]Num{Num(d.P50), Num(d.P90), Num(d.P99)}
		if d.P99 == 0 {
			p[2] = nan
		}
		return p
	}
	r := &CCReport{AgentShare: nan, ResetShare: nan, CompactionShare: nan}
	r.Quantities = []CCQuantity{
		{Name: "input tokens a main-agent request", N: len(c.input), Generated: pct(c.input), Published: [3]Num{195_000, 521_000, 849_000},
			Note: fmt.Sprintf("an outcome, not a parameter: cut by compaction near the model's %d-token context", limit)},
		{Name: "input growth over the previous turn", N: len(c.growth), Generated: pct(c.growth), Published: pub(ccGrowth),
			Note: fmt.Sprintf("new messages cut at %d tokens (half the context)", max(ccMinUser, limit/2))},
		{Name: "gap between turns, s", N: len(c.gaps), Generated: pct(c.gaps), Published: pub(ccGap)},
		{Name: "turns a session", N: len(c.turns), Generated: pct(c.turns), Published: pub(ccTurns),
			Note: "finished sessions only: a window shorter than sessions finishes the short ones"},
		{Name: "output tokens", N: len(c.output), Generated: pct(c.output), Published: [3]Num{317, nan, nan}},
		{Name: "subagents a group", N: len(c.groups), Generated: pct(c.groups), Published: [3]Num{7, 51, nan}},
	}
	if n := c.main + c.agents; n > 0 {
		r.AgentShare = Num(float64(c.agents) / float64(n))
	}
	if c.main > 0 {
		r.ResetShare = Num(float64(c.resets) / float64(c.main-c.compactions))
		r.CompactionShare = Num(float64(c.compactions) / float64(c.main))
	}
	return r
}

// writeTable prints the report as markdown.
func (r *CCReport) writeTable(b *strings.Builder) {
	b.WriteString("| quantity | generated p50 | p90 | p99 | published p50 | p90 | p99 | n | |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, q := range r.Quantities {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", q.Name,
			fmtQ(q.Generated[0]), fmtQ(q.Generated[1]), fmtQ(q.Generated[2]),
			fmtQ(q.Published[0]), fmtQ(q.Published[1]), fmtQ(q.Published[2]), q.N, q.Note)
	}
	fmt.Fprintf(b, "\nSubagent requests %s of all (published 51.7%%); prefix resets %s of main-agent turns (published 2.8%%); compaction requests %s of main-agent requests.\n",
		fmtPct1(r.AgentShare), fmtPct1(r.ResetShare), fmtPct1(r.CompactionShare))
}

func fmtQ(n Num) string {
	f := float64(n)
	switch {
	case math.IsNaN(f):
		return "-"
	case f >= 10_000:
		return fmt.Sprintf("%.0fK", f/1000)
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	default:
		return fmt.Sprintf("%.3g", f)
	}
}

func fmtPct1(n Num) string {
	if math.IsNaN(float64(n)) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n))
}

// DescribeTable is Describe as a markdown table, after checking the
// context.
func (w *Workload) DescribeTable(n, limit int) (string, error) {
	if err := w.checkContext(limit); err != nil {
		return "", err
	}
	var b strings.Builder
	w.Describe(n, limit).writeTable(&b)
	return b.String(), nil
}
