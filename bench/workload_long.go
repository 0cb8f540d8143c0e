package bench

import (
	"math"
	"math/rand/v2"
	"time"
)

// The long workload (`--workload long`): agent sessions as a coding agent
// runs them for real, beyond the six-turn one. The number of turns is
// heavy-tailed (most tasks take a few turns, some take hundreds); every
// later turn carries a tool result of a few hundred to a few thousand
// tokens; and a session that comes near the model's context compacts
// (compaction.go), as Claude Code auto-compacts, so it keeps going with a
// short summary in place of its history.
const (
	// Turns a session: a Pareto tail, P(turns ≥ t) = (LongTurnsMin/t)^LongTurnsAlpha
	// for t ≥ LongTurnsMin, cut at LongTurnsMax: median about 7.5, mean
	// about 15, one session in ten over 32, one in a hundred over 250.
	LongTurnsMin   = 4
	LongTurnsAlpha = 1.1
	LongTurnsMax   = 300
	// The first user message (the task, unique to the session).
	LongFirstMin = 1000
	LongFirstMax = 3000
	// Each later user message is a tool result, log-uniform between these
	// (median about 900 tokens, mean about 1,270).
	ToolResultMin = 200
	ToolResultMax = 4000
	// A compaction's summary: its max_tokens (the simulator generates
	// exactly that many).
	SummaryMin = 512
	SummaryMax = 1024
	// Before each later turn the agent runs a tool (a file read takes
	// milliseconds, a test suite tens of seconds): log-uniform between these
	// (median about 1.4 s, mean about 3.8 s). The session holds its context
	// meanwhile, so live context can outgrow the cache before the GPUs are
	// busy, as with real agents.
	ToolPauseMin = 100 * time.Millisecond
	ToolPauseMax = 20 * time.Second

	longPlanSalt = 0x10e6_0000_0000_0004
)

// LongShape is the long workload; its system prompt, first pause and
// output lengths are the agent workload's.
var LongShape = WorkloadShape{Name: "long", session: longSession, plan: longPlan}

// longPlan draws session i's sizes from the seed and i alone.
func longPlan(w *Workload, i int) sessionPlan {
	r := rand.New(rand.NewPCG(w.Seed^longPlanSalt, uint64(i)))
	turns := paretoTurns(r)
	p := sessionPlan{Users: []int{LongFirstMin + r.IntN(LongFirstMax-LongFirstMin+1)}}
	for range turns - 1 {
		p.Users = append(p.Users, logUniform(r, ToolResultMin, ToolResultMax))
	}
	for k := range turns {
		if k == 0 {
			p.Pauses = append(p.Pauses, PauseMin+time.Duration(r.Int64N(int64(PauseMax-PauseMin))))
		} else {
			p.Pauses = append(p.Pauses, time.Duration(logUniform(r, int(ToolPauseMin/time.Millisecond), int(ToolPauseMax/time.Millisecond)))*time.Millisecond)
		}
		p.MaxTokens = append(p.MaxTokens, MinOutputTokens+r.IntN(MaxOutputTokens-MinOutputTokens+1))
		// at most one compaction before each turn
		p.Summaries = append(p.Summaries, SummaryMin+r.IntN(SummaryMax-SummaryMin+1))
	}
	return p
}

// longSession is session i of the long workload: its plan, with text (and
// id) drawn for the variant as SessionVariant does.
func longSession(w *Workload, i int, variant uint64) *Session {
	p := longPlan(w, i)
	txt := rand.New(rand.NewPCG(w.Seed^sessionTextSalt^(variant*0x9e3779b97f4a7c15), uint64(i)))
	s := &Session{Index: i, ID: uuid(txt), Pauses: p.Pauses, MaxTokens: p.MaxTokens, Summaries: p.Summaries}
	head := padToToken("Task " + s.ID + ":")
	s.Users = append(s.Users, head+text(txt, p.Users[0]-len(head)/4))
	for _, n := range p.Users[1:] {
		s.Users = append(s.Users, text(txt, n))
	}
	return s
}

// paretoTurns draws a session's turn count.
func paretoTurns(r *rand.Rand) int {
	u := 1 - r.Float64() // (0, 1]
	t := math.Floor(LongTurnsMin * math.Pow(u, -1/LongTurnsAlpha))
	return int(min(t, LongTurnsMax))
}

// logUniform draws an integer whose logarithm is uniform on [lo, hi].
func logUniform(r *rand.Rand, lo, hi int) int {
	v := int(math.Round(float64(lo) * math.Pow(float64(hi)/float64(lo), r.Float64())))
	return min(max(v, lo), hi)
}
