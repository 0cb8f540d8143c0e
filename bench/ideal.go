package bench

import (
	"strings"

	"github.com/lmwarden/lmwarden/sim"
)

// The ideal hit rate is the share of prompt tokens a perfect router with an
// unlimited cache would serve from cache: every token is computed once per
// session (a turn computes only what the previous turn's prompt and reply did
// not already put in the cache) and the shared system prompt once per
// replica. It ignores block granularity, so real engines stay a little below.

// TurnTokens is what the ideal needs of one answered turn: its prompt length
// and how many of those tokens an ideal cache already held (the system
// section for a first turn; the previous prompt plus its reply otherwise).
type TurnTokens struct {
	Prompt int
	Reused int
}

// IdealHitRate pools turns: 1 - computed/prompt, with the system section of
// sysTokens computed once on each of replicas. It returns 0 without turns.
func IdealHitRate(turns []TurnTokens, sysTokens, replicas int) float64 {
	var prompt, computed int
	for _, t := range turns {
		prompt += t.Prompt
		computed += t.Prompt - min(t.Reused, t.Prompt)
	}
	if prompt == 0 {
		return 0
	}
	computed += sysTokens * replicas
	return 1 - float64(min(computed, prompt))/float64(prompt)
}

// SystemSectionTokens is how many prompt tokens the rendered system prompt
// takes (its text and role markers), i.e. the prefix every session shares.
func (w *Workload) SystemSectionTokens() int {
	return len(sim.RenderPrompt(w.System, nil)) - 1 // minus the generation marker
}

// IdealHitRate is the workload's steady-state ideal: sessions 0..n-1 played
// to the end with replies of their max_tokens, compacting at limit (the
// model's context; 0: never), the system prompt already cached everywhere.
// It is the reference line of the hit-rate plot.
func (w *Workload) IdealHitRate(n, limit int) float64 {
	if w.Shape.claudeCode {
		return w.ccIdeal(n, limit)
	}
	var turns []TurnTokens
	sys := w.SystemSectionTokens()
	for i := range n {
		w.plan(i).play(sys, limit, func(r playedRequest) {
			turns = append(turns, TurnTokens{Prompt: r.Prompt, Reused: r.Reused})
		})
	}
	return IdealHitRate(turns, 0, 0)
}

// fillerReply stands in for a reply of n tokens.
func fillerReply(n int) string { return strings.Repeat("done", n) }
