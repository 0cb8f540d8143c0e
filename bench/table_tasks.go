package bench

import (
	"fmt"
	"math"
)

// The second table of a report: what an agent user waits for (tasks.go).
// The columns left out of it are in report.json and report.csv.

const taskTableCaption = "Tasks (a session's turns, first request sent to the last token of its last turn; " +
	"the sessions that finished within the window), first and later turns, live context:"

var taskColumns = []column{
	{"tasks done", func(r Result) string { return fmt.Sprint(r.Completed) }},
	{"unfinished", func(r Result) string { return fmt.Sprint(r.TasksUnfinished) }},
	{"task p50", func(r Result) string { return fmtSec(r.TaskP50) }},
	{"task p95", func(r Result) string { return fmtSec(r.TaskP95) }},
	{"task p95 with unfinished", func(r Result) string { return fmtAtLeast(r.TaskP95Open, r.TasksUnfinished > 0) }},
	{"first TTFT p50", func(r Result) string { return fmtSec(r.TTFTFirstP50) }},
	{"first TTFT p95", func(r Result) string { return fmtSec(r.TTFTFirstP95) }},
	{"later TTFT p50", func(r Result) string { return fmtSec(r.TTFTLaterP50) }},
	{"later TTFT p95", func(r Result) string { return fmtSec(r.TTFTLaterP95) }},
	{"subagents' later cached", func(r Result) string { return fmtPct(r.SubagentCached) }},
	{"live ctx", func(r Result) string { return fmtTimes(r.LiveContextX) }},
}

// parkedColumns are shown when some request of the report waited at the
// warden (admission queue).
var parkedColumns = []column{
	{"parked", func(r Result) string { return fmt.Sprint(r.Parked) }},
	{"parked p50", func(r Result) string { return fmtSec(r.ParkedP50) }},
	{"parked p95", func(r Result) string { return fmtSec(r.ParkedP95) }},
	{"parked max", func(r Result) string { return fmtAtLeast(r.ParkedMax, r.ParkedAtClose > 0) }},
}

func (r *Report) taskColumns() []column {
	for _, x := range r.Results {
		if x.Parked > 0 {
			return append(append([]column(nil), taskColumns...), parkedColumns...)
		}
	}
	return taskColumns
}

// fmtAtLeast marks a lower bound (values that include a wait still going on).
func fmtAtLeast(n Num, lowerBound bool) string {
	s := fmtSec(n)
	if lowerBound && s != "-" {
		return "≥" + s
	}
	return s
}

// fmtTimes prints a ratio as "1.52x".
func fmtTimes(n Num) string {
	if math.IsNaN(float64(n)) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(n))
}
