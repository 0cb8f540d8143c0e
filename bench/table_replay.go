package bench

import (
	"fmt"
	"math"
	"strings"
)

// A replay's table (replay.go): per speed and arm, the hit rate against
// the slice's two ideals, the time to first token, the throughput and the
// conversations. The columns left out are in report.json and report.csv.

var replayColumns = []column{
	{"hit rate", func(r Result) string { return fmtPct(r.HitRate) }},
	{"of ideal", func(r Result) string {
		return fmtShare(r.HitRate, replayField(r, func(x *ReplayResult) Num { return x.IdealHitRate }))
	}},
	{"of cache ideal", func(r Result) string {
		return fmtShare(r.HitRate, replayField(r, func(x *ReplayResult) Num { return x.IdealCacheHitRate }))
	}},
	{"TTFT mean", func(r Result) string { return fmtSec(r.TTFTMean) }},
	{"TTFT p50", func(r Result) string { return fmtSec(r.TTFTP50) }},
	{"TTFT p90", func(r Result) string { return fmtSec(r.TTFTP90) }},
	{"TTFT p99", func(r Result) string { return fmtSec(r.TTFTP99) }},
	{"out tok/min", func(r Result) string { return fmtNum(r.OutputTokensPerMin, "%.0f") }},
	{"conversations done", func(r Result) string {
		if r.Replay == nil {
			return "-"
		}
		return fmt.Sprintf("%d/%d", r.Replay.ConversationsDone, r.Replay.Conversations)
	}},
	{"conversation p50", func(r Result) string { return fmtSec(r.TaskP50) }},
	{"conversation p95", func(r Result) string { return fmtSec(r.TaskP95) }},
	{"late turns", func(r Result) string {
		if r.Replay == nil {
			return "-"
		}
		if r.Replay.LateTurns == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (%s)", r.Replay.LateTurns, fmtSec(r.Replay.LateMeanSeconds))
	}},
	{"busy", func(r Result) string { return fmtNum(r.ReplicasBusy, "%.1f") }},
	{"stayed", func(r Result) string { return fmtPct(r.Stayed) }},
	{"run+wait", func(r Result) string { return fmtQueues(r.MeanRunning, r.MeanWaiting) }},
	{"requests", func(r Result) string { return fmt.Sprint(r.Requests) }},
	{"errors", func(r Result) string { return fmtErrors(r) }},
}

func replayField(r Result, f func(*ReplayResult) Num) Num {
	if r.Replay == nil {
		return Num(math.NaN())
	}
	return f(r.Replay)
}

// fmtShare prints a over b as a percentage ("-" without both).
func fmtShare(a, b Num) string {
	if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
}

// replayCaption says what was replayed and the slice's ideals.
func (r *Report) replayCaption() string {
	x := r.Replay
	header := "a session id per conversation (X-Claude-Code-Session-Id)"
	if !x.SessionHeader {
		header = "no session header"
	}
	slice := ""
	if x.FromSeconds > 0 || x.UntilSeconds > 0 {
		slice = fmt.Sprintf(" from %s", fmtDur(x.FromSeconds))
		if x.UntilSeconds > 0 {
			slice += " until " + fmtDur(x.UntilSeconds)
		}
	}
	var ideal, cache string
	if len(r.Results) > 0 && r.Results[0].Replay != nil {
		ideal, cache = fmtPct(r.Results[0].Replay.IdealHitRate), fmtPct(r.Results[0].Replay.IdealCacheHitRate)
	}
	var parts []string
	for _, a := range r.Arms {
		parts = append(parts, fmt.Sprintf("%s = %s", a, r.ArmPolicies[a]))
	}
	timing := r.timing()
	if r.SpillThreshold != "" {
		timing += ", spill threshold " + r.SpillThreshold
	}
	return fmt.Sprintf("%s run, %d replicas%s, seed %d: replay of %s%s (%d requests in %d conversations over %s of the trace; "+
		"blocks of %d tokens), %s; speed ×N plays N seconds of the trace a second; %s; %s; "+
		"ideal hit rate %s with an unlimited cache, %s with one cache of the replicas' total; %s.",
		r.Mode, r.Replicas, optional(" of "+r.Profile, r.Profile != ""), r.Seed, x.Trace, slice, x.Requests, x.Conversations,
		fmtDur(math.Round(x.SpanSeconds)), x.Block, header, strings.Join(parts, ", "), timing, ideal, cache, r.PercentileMethod)
}

const replayTableNote = "hit rate: the replicas' counters; of ideal, of cache ideal: that hit rate over the slice's ideal " +
	"with an unlimited cache and with one cache the size of the replicas' total; conversations done: every turn answered; " +
	"conversation p50, p95: first request sent to the last token of its last turn; late turns: sent after their time in the " +
	"trace because the turn before had not ended (mean delay)."
