package bench

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/lmwarden/lmwarden/sim"
)

// The Claude Code workload's text: the shared prefixes (the main agent's
// tool definitions and system prompt, the subagents' own), the same for
// every session and window of a seed, as for one CLI version; and each
// conversation's messages, drawn from the seed, the window's variant and
// where they sit (session, segment, group, subagent) alone.

const (
	ccTextSalt   = 0xc1a0_de00_0000_000a
	ccPrefixSalt = 0xc1a0_de00_0000_000b
)

// ccPrefixes are a seed's shared prefixes.
type ccPrefixes struct {
	once        sync.Once
	main, agent string
}

var ccPrefixCache sync.Map // seed → *ccPrefixes

// ccSystems returns the main agent's and the subagents' system text for
// the workload's seed: tool definitions then the system prompt.
func (w *Workload) ccSystems() (main, agent string) {
	v, _ := ccPrefixCache.LoadOrStore(w.Seed, &ccPrefixes{})
	p := v.(*ccPrefixes)
	p.once.Do(func() {
		r := rand.New(rand.NewPCG(w.Seed^ccPrefixSalt, 1))
		tools := padToToken("Tools available (JSON schemas):") + text(r, CCToolTokens-8)
		p.main = tools + padToToken("You are Claude Code, a coding agent.") + text(r, CCSystemTokens-9)
		p.agent = padToToken("You are a subagent of Claude Code; tools:") + text(r, CCAgentSystemTokens-11)
	})
	return p.main, p.agent
}

// ccText is the rand of one conversation's messages.
func ccText(w *Workload, variant uint64, session, part int) *rand.Rand {
	return rand.New(rand.NewPCG(w.Seed^ccTextSalt^variant*0x9e3779b97f4a7c15, uint64(session)<<24|uint64(part)))
}

// ccConversation makes a conversation of plan p: its first message
// starts with head (so no two share more than the system prompt), the
// others are drawn text.
func ccConversation(index int, id, head string, p sessionPlan, r *rand.Rand, limit int) *Conversation {
	s := &Session{Index: index, ID: id, Pauses: p.Pauses, MaxTokens: p.MaxTokens, Summaries: p.Summaries}
	h := padToToken(head)
	s.Users = append(s.Users, h+text(r, max(1, p.Users[0]-len(h)/sim.BytesPerToken)))
	for _, n := range p.Users[1:] {
		s.Users = append(s.Users, text(r, n))
	}
	c := NewConversation(s)
	c.Limit = limit
	return c
}

// agentID is a subagent's x-claude-code-agent-id: 16 hex digits.
func agentID(r *rand.Rand) string { return fmt.Sprintf("%016x", r.Uint64()) }
