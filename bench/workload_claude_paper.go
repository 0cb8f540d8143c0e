package bench

import (
	"math"

	"github.com/lmwarden/lmwarden/sim"
)

// The Claude Code workload on paper: its sessions played with replies of
// their max_tokens, as the simulator generates them, for the ideal hit
// rate, the requests a session, the load sizing and `--describe`.

// ClaudeCodeShape is the Claude Code workload (workload_claude.go).
var ClaudeCodeShape = WorkloadShape{Name: "claude-code", claudeCode: true}

// ccMinContext is the smallest model context the workload runs in: the
// first request (the 21K prefix and a 5K task) and a compaction of it.
const ccMinContext = 65_536

// ccPaperSessions is how many sessions the paper estimates play.
const ccPaperSessions = 512

// ccPlayed is one request of a session played on paper.
type ccPlayed struct {
	playedRequest
	agent bool // a subagent's
	group int  // the group's size, on the first request of a group's first agent (0 otherwise)
	// afterGroup: a main-agent request after a group, which waited for it
	// rather than for tools
	afterGroup bool
}

// ccPlay plays session i at limit and calls fn for every request: the
// main agent's in order, and after each main turn that launches a group
// the group's subagents one after another.
func (w *Workload) ccPlay(i, limit int, fn func(ccPlayed)) ccPlan {
	main, agent := w.ccSystems()
	sysMain, sysSub := systemSection(main), systemSection(agent)
	plan := ccSessionPlan(w.Seed, i, limit)
	turn, afterGroup := 0, false
	for _, seg := range plan.segments {
		seg.play(sysMain, limit, func(r playedRequest) {
			fn(ccPlayed{playedRequest: r, afterGroup: afterGroup})
			if r.Compaction {
				return
			}
			afterGroup = false
			if group, ok := plan.groups[turn]; ok {
				afterGroup = true
				for a, p := range group {
					first := true
					p.play(sysSub, limit, func(r playedRequest) {
						g := 0
						if a == 0 && first {
							g = len(group)
						}
						first = false
						fn(ccPlayed{playedRequest: r, agent: true, group: g})
					})
				}
			}
			turn++
		})
	}
	return plan
}

// ccIdeal is the workload's ideal hit rate over n sessions (Workload.IdealHitRate).
func (w *Workload) ccIdeal(n, limit int) float64 {
	var turns []TurnTokens
	for i := range n {
		w.ccPlay(i, limit, func(r ccPlayed) { turns = append(turns, TurnTokens{Prompt: r.Prompt, Reused: r.Reused}) })
	}
	return IdealHitRate(turns, 0, 0)
}

// ccMeanRequests is the mean requests a session sends, subagents' included.
func (w *Workload) ccMeanRequests(limit int) float64 {
	n := 0
	for i := range ccPaperSessions {
		w.ccPlay(i, limit, func(ccPlayed) { n++ })
	}
	return float64(n) / ccPaperSessions
}

// Describe plays n sessions on paper at the model's context limit and
// reports what they generate beside the published figures.
func (w *Workload) Describe(n, limit int) *CCReport {
	st := &ccStats{}
	for i := range n {
		lastPrompt, fresh, started := 0, true, false
		plan := w.ccPlay(i, limit, func(r ccPlayed) {
			if r.agent {
				st.agents++
				if r.group > 0 {
					st.groups = append(st.groups, float64(r.group))
				}
				return
			}
			st.main++
			if r.Compaction {
				st.compactions++
				return
			}
			st.input = append(st.input, float64(r.Prompt))
			st.output = append(st.output, float64(r.Output))
			if started && !r.afterGroup {
				st.gaps = append(st.gaps, r.Pause.Seconds())
			}
			started = true
			if !r.Fresh && !fresh {
				st.growth = append(st.growth, float64(r.Prompt-lastPrompt))
			}
			lastPrompt, fresh = r.Prompt, false
		})
		st.resets += len(plan.segments) - 1
		st.turns = append(st.turns, float64(plan.turns()))
	}
	return st.report(limit)
}

// ccEstimateLoad sizes a load (load.go) for the Claude Code workload: each
// session played on paper on a timeline (a request takes its pause, the
// prefill of what an ideal cache lacks and the decode of its output at the
// batch the load puts on a replica; a group lasts as long as its longest
// subagent, the parent holding its context meanwhile), its conversations'
// context weighted by the time they hold it.
func (w *Workload) ccEstimateLoad(p sim.Profile, replicas, limit int, load float64) LoadEstimate {
	cache := float64(replicas * p.NumBlocks() * p.BlockSize)
	est := LoadEstimate{Load: load, CacheTokens: cache}
	sessions := make([]ccTimeline, ccPaperSessions)
	for i := range sessions {
		sessions[i] = w.ccTimeline(i, limit)
	}
	convs, ctx := 1.0, 50_000.0 // live conversations a session, mean context: first guesses
	for range 8 {
		est.Sessions = load * cache / (ctx * convs)
		batch := int(math.Round(min(max(est.Sessions*convs/float64(replicas), 1), float64(p.MaxNumSeqs))))
		decode := p.StepCost(repeatChunk(sim.Chunk{Context: int(ctx), Tokens: 1}, batch)).Seconds()
		var held, duration, active float64
		for _, s := range sessions {
			h, d, a := s.weigh(p, decode)
			held, duration, active = held+h, duration+d, active+a
		}
		ctx, convs = held/active, active/duration
		est.MeanContext = held / duration // a session's live context, all its conversations
		est.SessionSeconds = duration / float64(len(sessions))
	}
	est.Sessions = load * cache / est.MeanContext
	est.PerMin = est.Sessions / est.SessionSeconds * 60
	return est
}

// ccTimeline is a session's requests on paper, grouped as they run.
type ccTimeline struct {
	main   []playedRequest
	groups map[int][][]playedRequest // after main request k: each subagent's requests
}

func (w *Workload) ccTimeline(i, limit int) ccTimeline {
	t := ccTimeline{groups: map[int][][]playedRequest{}}
	w.ccPlay(i, limit, func(r ccPlayed) {
		if !r.agent {
			t.main = append(t.main, r.playedRequest)
			return
		}
		k := len(t.main) - 1
		if r.First {
			t.groups[k] = append(t.groups[k], nil)
		}
		g := t.groups[k]
		g[len(g)-1] = append(g[len(g)-1], r.playedRequest)
	})
	return t
}

// weigh returns a session's context held over time (token-seconds), its
// duration and the conversation-seconds it has live, with a decode step of
// decode seconds.
func (t ccTimeline) weigh(p sim.Profile, decode float64) (held, duration, active float64) {
	took := func(r playedRequest) float64 {
		return r.Pause.Seconds() + prefillSeconds(p, r.Reused, r.Uncache) + float64(r.Output)*decode
	}
	for k, r := range t.main {
		d := took(r)
		held, duration, active = held+float64(r.Prompt)*d, duration+d, active+d
		longest := 0.0
		for _, agent := range t.groups[k] {
			var a float64
			for _, q := range agent {
				d := took(q)
				held, active, a = held+float64(q.Prompt)*d, active+d, a+d
			}
			longest = max(longest, a)
		}
		held += float64(r.Prompt+r.Output) * longest // the parent waits, holding its context
		duration, active = duration+longest, active+longest
	}
	return held, duration, active
}
