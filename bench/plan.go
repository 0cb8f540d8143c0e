package bench

import (
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// sessionPlan is a session's sizes without its text: what the ideal hit
// rate and the load estimates (load.go) need, cheap to draw for thousands
// of sessions.
type sessionPlan struct {
	Users     []int // tokens of each user message (turn k's)
	MaxTokens []int // max_tokens of each turn
	Pauses    []time.Duration
	// Summaries are the max_tokens of the session's successive compaction
	// requests (compaction.go); nil for a session that never compacts.
	Summaries []int
}

// plan returns session i's sizes: the shape's own plan where it has one
// (long), else measured from the generated session (text is exactly
// sim.BytesPerToken bytes a token).
func (w *Workload) plan(i int) sessionPlan {
	if w.Shape.plan != nil {
		return w.Shape.plan(w, i)
	}
	s := w.Session(i)
	p := sessionPlan{MaxTokens: s.MaxTokens, Pauses: s.Pauses, Summaries: s.Summaries}
	for _, u := range s.Users {
		p.Users = append(p.Users, sim.TokenCount(u))
	}
	return p
}

// playedRequest is one request of a played session.
type playedRequest struct {
	Prompt  int  // prompt tokens, as the simulator renders them
	Reused  int  // what an ideal cache already held of it
	Output  int  // tokens generated (the request's max_tokens)
	Uncache int  // Prompt - Reused: what an ideal cache computes
	First   bool // the session's first request
	// Fresh: its history starts over (the first request, or after a
	// compaction); Compaction: it asks for the summary.
	Fresh, Compaction bool
	// Pause is the client's wait before the request.
	Pause time.Duration
}

// play walks a plan as a conversation would, with replies of max_tokens
// and compaction at limit (0: never), and calls fn for every request.
// sysSection is the rendered system prompt's tokens (SystemSectionTokens).
func (p sessionPlan) play(sysSection, limit int, fn func(playedRequest)) {
	held := 0      // prompt + reply of the last answered request
	fresh := true  // the next request's history starts over
	pending := 0   // tokens of a summary waiting to lead the next user message
	compacted := 0 // compactions so far
	for turn := 0; turn < len(p.Users); {
		if !fresh && compactionDue(held, p.Users[turn], p.MaxTokens[turn], limit) &&
			compacted < len(p.Summaries) {
			// history + the compaction instruction; its reply is the summary
			prompt := held + 2 + messageTokens(compactionInstructionTokens)
			out := p.Summaries[compacted]
			fn(playedRequest{Prompt: prompt, Reused: held, Output: out, Uncache: prompt - held, Pause: p.Pauses[turn], Compaction: true})
			compacted++
			pending = sim.TokenCount(summaryIntro) + out + sim.TokenCount(summarySeparator)
			fresh = true
			held = 0
			continue
		}
		var prompt, reused int
		wasFresh := fresh
		if fresh {
			prompt = sysSection + messageTokens(pending+p.Users[turn]) + 1
			reused = sysSection
			pending = 0
		} else {
			prompt = held + 2 + messageTokens(p.Users[turn]) // the reply's end marker, the next generation marker
			reused = held
		}
		out := p.MaxTokens[turn]
		fn(playedRequest{Prompt: prompt, Reused: reused, Output: out, Uncache: prompt - reused,
			First: turn == 0, Fresh: wasFresh, Pause: p.Pauses[turn]})
		held = prompt + out
		fresh = false
		turn++
	}
}

// messageTokens is a message of n content tokens as the simulator renders
// it: its role marker and end marker around the content.
func messageTokens(n int) int { return n + 2 }
