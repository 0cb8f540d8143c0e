package bench

import (
	"fmt"

	"github.com/lmwarden/lmwarden/sim"
)

// Compaction, as Claude Code auto-compacts: when a session's next request
// would come near the model's context, the client first asks the model
// for a summary of the conversation (the history plus an instruction, the
// summary as the reply), then starts over from it: the next prompt is the
// system prompt and one user message holding the summary and the new
// message, so it shares only the system prompt with everything before.
// The session id stays the same. Sessions whose plan has Summaries
// (workload long) do it; the others never come near a limit.

// CompactShare is how much of the model's context a request (history, the
// new message and its max_tokens) may take before the session compacts.
const CompactShare = 0.9

// MinCompactionContext is the smallest model context a compacting
// workload runs against: the compaction request itself (a history of up to
// CompactShare of the context, the instruction and the summary's
// max_tokens) must fit in it.
const MinCompactionContext = 16_384

var (
	// compactionInstruction is the user message of a compaction request,
	// the same for every session.
	compactionInstruction = padToToken("Your task is to create a detailed summary of the conversation so far, " +
		"paying close attention to the user's explicit requests and your previous actions. Capture the " +
		"technical details, code patterns and architectural decisions that would be essential for continuing " +
		"the work without losing context: the files examined and changed, the errors met and how they were " +
		"fixed, the problems solved, every pending task and the current work. Reply with the summary only.")
	compactionInstructionTokens = sim.TokenCount(compactionInstruction)
	// summaryIntro leads the user message that carries a summary.
	summaryIntro = padToToken("This session is being continued from a previous conversation that ran out of " +
		"context. The conversation is summarized below:\n")
	summarySeparator = "\n\n" // between the summary and the new message
)

// compactionDue says whether a request of user new tokens and maxTokens on
// a history of held tokens (the last prompt and its reply) would take more
// than CompactShare of limit (0: no limit).
func compactionDue(held, user, maxTokens, limit int) bool {
	return limit > 0 && float64(held+2+messageTokens(user)+maxTokens) > CompactShare*float64(limit)
}

// compactState is a conversation's compaction bookkeeping.
type compactState struct {
	requests    int    // sent so far
	held        int    // prompt + reply tokens of the last answered request (0: starts over)
	compacting  bool   // the request in flight asks for the summary
	compactions int    // done so far
	summary     string // the summary, until the next user message carries it
	fresh       bool   // the next request's history starts over (after a compaction)
}

// Request is what a conversation sends next.
type Request struct {
	Messages  []sim.Message
	MaxTokens int
	// First: the session's first request. Fresh: its history starts here
	// (the first request, and the one after a compaction), so it shares
	// only the system prompt with the requests before it.
	First, Fresh bool
	// Compaction: this request asks for the summary.
	Compaction bool
}

// NextRequest returns the next request to send: the next turn, or, when
// the conversation would come near Limit, the compaction request before
// it. It is only valid while Done() is false, once per answer.
func (c *Conversation) NextRequest() Request {
	s, st := c.Session, &c.compact
	first := st.requests == 0
	st.requests++
	if !first && !st.fresh && st.compactions < len(s.Summaries) &&
		compactionDue(st.held, sim.TokenCount(s.Users[c.Turn]), s.MaxTokens[c.Turn], c.Limit) {
		st.compacting = true
		msgs := append(c.History[:len(c.History):len(c.History)], sim.Message{Role: "user", Content: compactionInstruction})
		return Request{Messages: msgs, MaxTokens: s.Summaries[st.compactions], Compaction: true}
	}
	fresh := first || st.fresh
	if st.summary != "" {
		c.History = append(c.History, sim.Message{Role: "user", Content: st.summary + summarySeparator + s.Users[c.Turn]})
		st.summary = ""
	} else {
		c.Next()
	}
	st.fresh = false
	return Request{Messages: c.History, MaxTokens: s.MaxTokens[c.Turn], First: first, Fresh: fresh}
}

// Answer records the reply to the request NextRequest returned, with the
// prompt and output tokens the response's usage gave (prompt 0: unknown,
// estimated from the text).
func (c *Conversation) Answer(text string, promptTokens, outputTokens int) {
	st := &c.compact
	if st.compacting {
		st.compacting = false
		st.compactions++
		c.History = nil
		st.summary = summaryIntro + text
		st.fresh = true
		st.held = 0
		return
	}
	if promptTokens > 0 {
		st.held = promptTokens + outputTokens
	} else {
		st.held += 4 + sim.TokenCount(c.History[len(c.History)-1].Content) + sim.TokenCount(text)
	}
	c.Reply(text)
}

// Compactions is how many times the conversation compacted so far.
func (c *Conversation) Compactions() int { return c.compact.compactions }

// checkContext refuses a model context that a workload whose sessions
// compact cannot run in (limit: tokens; 0 unknown).
func (w *Workload) checkContext(limit int) error {
	if w.Shape.claudeCode {
		if limit < ccMinContext {
			return fmt.Errorf("%w: workload %s needs a model context of at least %d tokens (its sessions start at about 25K and grow to hundreds of thousands), not %d: use a profile such as h200-qwen3-4b or give --max-context",
				ErrBadConfig, w.Shape.Name, ccMinContext, limit)
		}
		return nil
	}
	if !w.compacts() || limit >= MinCompactionContext {
		return nil
	}
	if limit <= 0 {
		return fmt.Errorf("%w: workload %s compacts near the model's context, which is unknown: give --max-context", ErrBadConfig, w.Shape.Name)
	}
	return fmt.Errorf("%w: workload %s needs a model context of at least %d tokens, not %d", ErrBadConfig, w.Shape.Name, MinCompactionContext, limit)
}

// compacts says whether the workload's sessions compact near the context.
func (w *Workload) compacts() bool { return w.Shape.claudeCode || w.plan(0).Summaries != nil }
