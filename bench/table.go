package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// column is one metric of the table: its header and how to print it.
type column struct {
	head string
	cell func(Result) string
}

var columns = []column{
	{"sessions/h", func(r Result) string { return fmtNum(r.SessionsPerHour, "%.0f") }},
	{"out tok/min", func(r Result) string { return fmtNum(r.OutputTokensPerMin, "%.0f") }},
	{"TTFT p50", func(r Result) string { return fmtSec(r.TTFTP50) }},
	{"TTFT p95", func(r Result) string { return fmtSec(r.TTFTP95) }},
	{"session p50", func(r Result) string { return fmtSec(r.SessionTTFTP50) }},
	{"session p95", func(r Result) string { return fmtSec(r.SessionTTFTP95) }},
	{"busy", func(r Result) string { return fmtNum(r.ReplicasBusy, "%.1f") }},
	{"hit rate", func(r Result) string { return fmtPct(r.HitRate) }},
	{"resp cached", func(r Result) string { return fmtPct(r.ClientCachedShare) }},
	{"queries/prompt", func(r Result) string { return fmtNum(r.QueriesPerPromptToken, "%.2f") }},
	{"stayed", func(r Result) string { return fmtPct(r.Stayed) }},
	{"load %", func(r Result) string { return fmtLoad(r.Load) }},
	{"run+wait", func(r Result) string { return fmtQueues(r.MeanRunning, r.MeanWaiting) }},
	{"requests", func(r Result) string { return fmt.Sprint(r.Requests) }},
	{"errors", func(r Result) string { return fmtErrors(r) }},
}

// WriteTable prints the report as markdown. With two arms each cell reads
// "first → second" (e.g. off → on); with more, one row per step and arm.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	if r.Replay != nil {
		fmt.Fprintf(&b, "%s\n\n", r.replayCaption())
		r.longTable(&b, replayColumns)
		b.WriteString("\n" + replayTableNote + "\n")
	} else {
		fmt.Fprintf(&b, "%s\n\n", r.caption())
		r.writeTables(&b, columns)
		b.WriteString("\n" + taskTableCaption + "\n\n")
		r.writeTables(&b, r.taskColumns())
		r.writeClaudeCode(&b)
	}
	for _, n := range r.StepNotes {
		fmt.Fprintf(&b, "- load %s\n", n)
	}
	for _, x := range r.Results {
		for _, n := range x.Notes {
			fmt.Fprintf(&b, "- %s, %s: %s\n", x.phrase(), x.Arm, n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) caption() string {
	var parts []string
	for _, a := range r.Arms {
		parts = append(parts, fmt.Sprintf("%s = %s", a, r.ArmPolicies[a]))
	}
	timing := r.timing()
	if r.PollSeconds > 0 {
		timing += fmt.Sprintf(", replica stats reach the placement every %gs", r.PollSeconds)
	}
	if r.SpillThreshold != "" {
		timing += ", spill threshold " + r.SpillThreshold
	}
	return fmt.Sprintf("%s run, %d replicas%s, %s a step, seed %d%s; %s; %s; "+
		"TTFT = first streamed token at the client, %s; workload ideal hit rate %s.",
		r.Mode, r.Replicas, optional(" of "+r.Profile, r.Profile != ""), fmtDur(r.StepSeconds), r.Seed,
		r.workloadPhrase(), strings.Join(parts, ", "), timing, r.PercentileMethod, fmtPct(r.WorkloadIdeal))
}

// writeTables prints one table of the columns: paired with two arms, one
// row per step and arm otherwise.
func (r *Report) writeTables(b *strings.Builder, columns []column) {
	if len(r.Arms) == 2 {
		r.pairTable(b, columns)
	} else {
		r.longTable(b, columns)
	}
}

func (r *Report) pairTable(b *strings.Builder, columns []column) {
	a0, a1 := r.Arms[0], r.Arms[1]
	fmt.Fprintf(b, "| %s |", r.stepHead())
	for _, c := range columns {
		fmt.Fprintf(b, " %s |", c.head)
	}
	b.WriteString("\n|---:|")
	for range columns {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, s := range r.Steps {
		x, ok0 := r.FindStep(s, a0)
		y, ok1 := r.FindStep(s, a1)
		if !ok0 && !ok1 {
			continue
		}
		fmt.Fprintf(b, "| %s |", s)
		for _, c := range columns {
			fmt.Fprintf(b, " %s → %s |", cellOr(c, x, ok0), cellOr(c, y, ok1))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "\nEach cell: %s → %s.\n", a0, a1)
}

func (r *Report) longTable(b *strings.Builder, columns []column) {
	fmt.Fprintf(b, "| %s | arm |", r.stepHead())
	for _, c := range columns {
		fmt.Fprintf(b, " %s |", c.head)
	}
	b.WriteString("\n|---:|---|")
	for range columns {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, s := range r.Steps {
		for _, a := range r.Arms {
			x, ok := r.FindStep(s, a)
			if !ok {
				continue
			}
			fmt.Fprintf(b, "| %s | %s |", s, a)
			for _, c := range columns {
				fmt.Fprintf(b, " %s |", c.cell(x))
			}
			b.WriteString("\n")
		}
	}
}

// workloadPhrase says which sessions ran, how they arrived and where they
// compact ("" for the default: the agent workload in a closed loop).
func (r *Report) workloadPhrase() string {
	var s string
	if r.Workload != "" && r.Workload != DefaultShape.Name {
		s += ", workload " + r.Workload
	}
	if len(r.Steps) > 0 && r.Steps[0].Open() {
		s += ", sessions arriving at random (Poisson)"
	}
	if (r.Workload == LongShape.Name || r.Workload == ClaudeCodeShape.Name) && r.MaxContext > 0 {
		s += fmt.Sprintf(", compaction near a %d-token context", r.MaxContext)
	}
	return s
}

// stepHead heads the step column: "sessions" when every step is a plain
// closed-loop count, "step" otherwise (loads show their sizing).
func (r *Report) stepHead() string {
	if r.Replay != nil {
		return "speed"
	}
	for _, s := range r.Steps {
		if s.Open() || s.CacheLoad > 0 {
			return "step"
		}
	}
	return "sessions"
}

func cellOr(c column, r Result, ok bool) string {
	if !ok {
		return "-"
	}
	return c.cell(r)
}

func fmtNum(n Num, format string) string {
	if math.IsNaN(float64(n)) {
		return "-"
	}
	return fmt.Sprintf(format, float64(n))
}

func fmtPct(n Num) string {
	if math.IsNaN(float64(n)) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n))
}

func fmtSec(n Num) string {
	f := float64(n)
	switch {
	case math.IsNaN(f):
		return "-"
	case f < 10:
		return fmt.Sprintf("%.2fs", f)
	default:
		return fmt.Sprintf("%.1fs", f)
	}
}

func fmtDur(sec float64) string {
	if sec >= 60 && math.Mod(sec, 60) == 0 {
		return fmt.Sprintf("%.0f min", sec/60)
	}
	return fmt.Sprintf("%gs", sec)
}

func fmtLoad(load []float64) string {
	if len(load) == 0 {
		return "-"
	}
	parts := make([]string, len(load))
	for i, l := range load {
		parts[i] = fmt.Sprintf("%.0f", 100*l)
	}
	return strings.Join(parts, "/")
}

// fmtErrors makes a failed step impossible to miss in the table.
func fmtErrors(r Result) string {
	if !r.Failed() {
		return "0"
	}
	s := fmt.Sprintf("**%d FAILED**", r.Errors+r.Timeouts)
	if r.Timeouts > 0 {
		s += fmt.Sprintf(" (%d timeouts)", r.Timeouts)
	}
	return s
}

func optional(s string, ok bool) string {
	if ok {
		return s
	}
	return ""
}

// fmtQueues prints each replica's mean running+waiting, e.g. "4+2/3+0".
func fmtQueues(run, wait []Num) string {
	if len(run) == 0 || len(run) != len(wait) {
		return "-"
	}
	parts := make([]string, len(run))
	for i := range run {
		if math.IsNaN(float64(run[i])) {
			parts[i] = "?"
			continue
		}
		parts[i] = fmt.Sprintf("%.1f+%.1f", float64(run[i]), float64(wait[i]))
	}
	return strings.Join(parts, "/")
}

// writeClaudeCode prints what the Claude Code workload sent in the report's
// longest window beside the published figures (report.json has every
// window's).
func (r *Report) writeClaudeCode(b *strings.Builder) {
	var best *Result
	for i, x := range r.Results {
		if x.ClaudeCode != nil && (best == nil || x.Requests > best.Requests) {
			best = &r.Results[i]
		}
	}
	if best == nil {
		return
	}
	fmt.Fprintf(b, "\nThe Claude Code workload as sent (%s, %s; warm-up included), beside the published figures:\n\n", best.phrase(), best.Arm)
	best.ClaudeCode.writeTable(b)
}

// timing says whose clock the report's times are.
func (r *Report) timing() string {
	switch {
	case r.Mode == "virtual":
		return "simulated times (virtual clock)"
	case r.Speed > 1:
		return fmt.Sprintf("simulated times (replicas at %gx, client times scaled back)", r.Speed)
	}
	return "wall-clock times"
}
