package bench

import (
	"math"
	"math/rand/v2"
	"time"
)

// The Claude Code workload (`--workload claude-code`): sessions shaped by
// the published distributions of production Claude Code traffic and by
// what the CLI sends. docs/workload.md gives every parameter with its
// source; "ours" marks the choices where nothing is published.
const (
	// The prefix every main-agent request of the same CLI version starts
	// with: tool definitions, then the system prompt (published: a first
	// request of about 25K tokens, about 15K of them tool definitions and
	// 6K the system prompt, identical across sessions).
	CCToolTokens   = 15_000
	CCSystemTokens = 6_000
	// The session's own first message (the task and its environment),
	// uniform in this range: the rest of the published 25K (ours: the
	// spread).
	CCFirstMin = 3_000
	CCFirstMax = 5_000
	// A subagent's prefix, shared by every subagent (its own system prompt
	// and tools), and its task, uniform: about 13K to start (published;
	// ours: the split and the spread).
	CCAgentSystemTokens = 10_000
	CCAgentTaskMin      = 2_000
	CCAgentTaskMax      = 4_000
	// The chance that a main-agent turn is a prefix reset (the history
	// starts over with a new task: /clear): 2.8% of turns (published).
	CCResetShare = 0.028
	// A compaction's summary, uniform (ours; published: compactions bring
	// the context back under 30K).
	CCSummaryMin = 2_000
	CCSummaryMax = 8_000
	// The published share of requests that come from subagent groups
	// (40,367 of 78,099); groups are launched after a main turn with the
	// probability that gives it (ccGroupChance).
	CCAgentRequestShare = 40_367.0 / 78_099.0

	ccPlanSalt  = 0xc1a0_de00_0000_0008
	ccGroupSalt = 0xc1a0_de00_0000_0009
)

// The published percentiles (p50, p90, p99), and our choices where only
// part is published.
var (
	// Turns a session, main agent (published 107, 354, 992).
	ccTurns = quantileDist{P50: 107, P90: 354, P99: 992, Min: 1, Max: 3000}
	// Input growth over the previous turn, in tokens: the previous reply
	// and the new tool results (published 632, 3,735, 148K). The new
	// message's distribution (ccNew) is fitted so that the reply, its
	// markers and the new message have these percentiles; a new message is
	// cut at half the model's context, so that a turn fits after a
	// compaction.
	ccGrowth = quantileDist{P50: 632, P90: 3_735, P99: 148_000, Min: 1, Max: 1e7}
	// Wall-clock gap between turns, the tools running (published 2 s,
	// 24 s, 11.4 min), in seconds.
	ccGap = quantileDist{P50: 2, P90: 24, P99: 684, Min: 0.05, Max: 3600}
	// Output tokens a request (published median 317; ours: a log-normal
	// spread of 1, so p90 about 1,140, cut at 8,192).
	ccOutput = quantileDist{P50: 317, P90: 1_141, Min: 1, Max: 8_192}
	// Subagents launched together (published: 7 at the median, 51 at p90;
	// ours: cut at 100).
	ccGroupSize = quantileDist{P50: 7, P90: 51, Min: 1, Max: 100}
	// A subagent's turns (ours, from "a few to tens": median 8, p90 30,
	// cut at 60; the CLI observed here ran subagents of 10 and 12).
	ccAgentTurns = quantileDist{P50: 8, P90: 30, Min: 1, Max: 60}
)

// ccMinUser is the smallest new message of a later turn (a tool result is
// never empty).
const ccMinUser = 16

// ccPlan is a Claude Code session's sizes, drawn from the seed and its
// index alone.
type ccPlan struct {
	// segments are the main agent's turns, split where a prefix reset
	// starts the history over; each is played as a conversation of its own
	// under the same session id.
	segments []sessionPlan
	// groups[k] is the group launched after the main agent's k-th turn
	// (counted across segments), if any.
	groups map[int][]sessionPlan
}

// turns is the main agent's turns.
func (p ccPlan) turns() int {
	n := 0
	for _, s := range p.segments {
		n += len(s.Users)
	}
	return n
}

// ccSessionPlan draws session i's plan; limit is the model's context.
func ccSessionPlan(seed uint64, i, limit int) ccPlan {
	r := rand.New(rand.NewPCG(seed^ccPlanSalt, uint64(i)))
	maxUser := max(ccMinUser, limit/2)
	turns := ccTurns.drawInt(r)
	p := ccPlan{groups: map[int][]sessionPlan{}}
	var seg sessionPlan
	for k := range turns {
		out := ccOutput.drawInt(r)
		switch {
		case k == 0 || r.Float64() < CCResetShare:
			pause := clientPause(r)
			if k > 0 { // a new task after the gap
				p.segments = append(p.segments, seg)
				pause = seconds(ccGap.draw(r))
			}
			seg = sessionPlan{}
			seg.Users = append(seg.Users, CCFirstMin+r.IntN(CCFirstMax-CCFirstMin+1))
			seg.Pauses = append(seg.Pauses, pause)
		default:
			// the growth is the reply, its markers and the new message
			seg.Users = append(seg.Users, min(ccNew.drawInt(r), maxUser))
			seg.Pauses = append(seg.Pauses, seconds(ccGap.draw(r)))
		}
		seg.MaxTokens = append(seg.MaxTokens, out)
		seg.Summaries = append(seg.Summaries, CCSummaryMin+r.IntN(CCSummaryMax-CCSummaryMin+1))
	}
	p.segments = append(p.segments, seg)
	g := rand.New(rand.NewPCG(seed^ccGroupSalt, uint64(i)))
	for k := range turns - 1 { // no group after the last turn
		if g.Float64() < ccChance {
			p.groups[k] = ccGroup(g, maxUser)
		}
	}
	return p
}

// ccGroup draws one group of subagents.
func ccGroup(r *rand.Rand, maxUser int) []sessionPlan {
	agents := make([]sessionPlan, ccGroupSize.drawInt(r))
	for a := range agents {
		turns := ccAgentTurns.drawInt(r)
		s := sessionPlan{Users: []int{CCAgentTaskMin + r.IntN(CCAgentTaskMax-CCAgentTaskMin+1)},
			Pauses: []time.Duration{clientPause(r)}}
		for k := range turns {
			if k > 0 {
				s.Users = append(s.Users, min(ccNew.drawInt(r), maxUser))
				s.Pauses = append(s.Pauses, seconds(ccGap.draw(r)))
			}
			s.MaxTokens = append(s.MaxTokens, ccOutput.drawInt(r))
			s.Summaries = append(s.Summaries, CCSummaryMin+r.IntN(CCSummaryMax-CCSummaryMin+1))
		}
		agents[a] = s
	}
	return agents
}

// ccChance is ccGroupChance, computed once.
var ccChance = ccGroupChance()

// ccGroupChance is the chance that a main turn launches a group, such that
// subagent requests are CCAgentRequestShare of all requests: with g the
// chance, main turns T and R subagent requests a group,
// share = g·R / (1 + g·R), so g = share / ((1 - share) · E[R]). E[R] is the
// mean group size times a subagent's mean turns, computed from the
// distributions once.
func ccGroupChance() float64 {
	meanR := ccMeanOf(ccGroupSize) * ccMeanOf(ccAgentTurns)
	return CCAgentRequestShare / ((1 - CCAgentRequestShare) * meanR)
}

// ccMeanOf is a distribution's mean (integers, as drawn), by quadrature
// over its quantiles.
func ccMeanOf(d quantileDist) float64 {
	const n = 20_000
	var s float64
	for i := range n {
		s += float64(int(d.at((float64(i)+0.5)/n) + 0.5))
	}
	return s / n
}

// clientPause is the client's own pause before a first request
// (20-80 ms, the other workloads').
func clientPause(r *rand.Rand) time.Duration {
	return PauseMin + time.Duration(r.Int64N(int64(PauseMax-PauseMin)))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ccNew is the distribution of a later turn's new message, fitted (once)
// so that the growth it makes with the reply before it, reply + 4 markers
// + message, has ccGrowth's percentiles: the reply is drawn on its own
// (ccOutput), so the message is what the published growth leaves.
var ccNew = fitNewMessage()

func fitNewMessage() quantileDist {
	const n = 40_000
	r := rand.New(rand.NewPCG(0xc1a0_de00_0000_000c, 1)) // a fixed sample: the fit is the same every run
	outs, us := make([]float64, n), make([]float64, n)
	for i := range n {
		outs[i], us[i] = float64(ccOutput.drawInt(r)), r.Float64()
		for us[i] == 0 {
			us[i] = r.Float64()
		}
	}
	d := quantileDist{P50: ccGrowth.P50 - ccOutput.P50, P90: ccGrowth.P90, P99: ccGrowth.P99, Min: ccMinUser, Max: 1e7}
	g := make([]float64, n)
	for range 40 {
		for i := range n {
			g[i] = outs[i] + 4 + math.Round(d.at(us[i]))
		}
		d.P50 *= ccGrowth.P50 / Percentile(g, 50)
		d.P90 *= ccGrowth.P90 / Percentile(g, 90)
		d.P99 *= ccGrowth.P99 / Percentile(g, 99)
	}
	return d
}
