package bench

import (
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// A flow is one task a runner plays whose requests are not a single
// conversation's turns one after the other: a replayed conversation whose
// turns arrive at the trace's times, or a Claude Code session whose
// subagents run side by side while the parent waits. The flow decides what
// to send and when; the runner (virtual or real) sends, measures and hands
// the answers back. Flows hold no clock: times are offsets from the
// window's start, in the replicas' time.

// flowSend is one request a flow asks for.
type flowSend struct {
	At time.Duration // when to send it (at once if already past)
	// Conv names the conversation it belongs to: per-session statistics,
	// the live context and where its previous request went are kept by it.
	Conv string
	// Session and Agent are the X-Claude-Code-Session-Id and
	// x-claude-code-agent-id headers it carries ("": none).
	Session, Agent string
	System         string
	Messages       []sim.Message
	// Prompt is the rendered prompt when the flow has it at hand (virtual
	// runs render System and Messages otherwise).
	Prompt    []uint32
	MaxTokens int
	// First: its conversation's first request in the window (a cold
	// prompt); Fresh: its history starts over (first, or after a
	// compaction), sharing only the system prompt with what came before.
	First, Fresh bool
	// Reused is how many of its tokens an unlimited cache already holds
	// (the workload's ideal hit rate), when the flow knows.
	Reused     int
	Compaction bool
	// SubagentLater: a subagent's request after its first that continues
	// its history (how much of these the cache serves is a goal of its own).
	SubagentLater bool
	Turn          int // its conversation's turn, for the trace
	// Bytes is the request body's size the placement is told (the shim
	// knows it from Content-Length); 0: estimated from the messages.
	Bytes int64
	// Held is the start of the request body as sent, when the flow has it
	// at hand and Messages does not hold it (virtual runs without a
	// session header key the conversation by it; bench/virtual_key.go).
	Held []byte
	tag  any // the flow's own bookkeeping
}

// flowAnswer is what a runner saw of a request.
type flowAnswer struct {
	Text                   string
	Prompt, Cached, Output int
	Err                    error
	FinishedAt             time.Duration // offset of its last token
	TTFT                   float64       // seconds; NaN when no token came
}

// flow is one task.
type flow interface {
	// ID names the task (its session), for task statistics.
	ID() string
	// Start returns the first requests.
	Start(now time.Duration) []flowSend
	// Answered hands a request's answer back (a failure too: Err set) and
	// returns what to send next.
	Answered(s *flowSend, a flowAnswer, now time.Duration) []flowSend
	// Ended returns the conversations that ended since it was last
	// called (their live context ends).
	Ended() []string
	// Done says the task has nothing left to send or wait for; Failed,
	// that a failure ended it.
	Done() bool
	Failed() bool
}

// flowPlan is what a window plays: flows starting at given offsets, and,
// for a closed loop, a source of replacements for finished ones.
type flowPlan struct {
	starts []flowStart
	// next, when set, starts a new flow each time one ends (closed loop).
	next func() flow
	// untilDone: the window lasts until every flow is done (a replay),
	// not a fixed duration; span is how long that should take if no
	// request were slow (for progress).
	untilDone bool
	span      time.Duration
	// sysTokens are the system prefixes every conversation shares,
	// computed once a replica in the ideal hit rate.
	sysTokens int
}

type flowStart struct {
	at time.Duration
	f  func() flow // built when it starts (its text is drawn then)
}
