package placement

import "fmt"

// A conversation is what placement keeps together on one replica: what the
// agent sends again every turn, not a session id (docs/placement.md,
// "Conversations"). Claude Code's subagents carry their parent's session
// id, but each has its own system prompt and history: with the agent
// header a subagent is a conversation of its own, keyed by the session and
// the agent, and its parent's pin is its parent's alone. A client that
// sends no session header is keyed by its body's stable start (the first
// system block and first user message, l7/bodykey): requests that share
// it share that prefix of their prompts.

// ConversationKind says what identified a request's conversation.
type ConversationKind uint8

const (
	// ConvNone: no session header and no usable start of the body;
	// placed by load, nothing pinned.
	ConvNone ConversationKind = iota
	// ConvSession: a session header alone, the session's main
	// conversation, keyed by the session id as before agents were known.
	ConvSession
	// ConvSubagent: a session header and an agent header: an agent's
	// own conversation within the session.
	ConvSubagent
	// ConvBody: no session header; keyed by the body's stable start.
	ConvBody

	NumConversationKinds
)

var conversationKindNames = [NumConversationKinds]string{"none", "session", "subagent", "body"}

// String is the name used in metrics labels and JSON.
func (k ConversationKind) String() string {
	if k < NumConversationKinds {
		return conversationKindNames[k]
	}
	return fmt.Sprintf("conversation(%d)", uint8(k))
}

// conversation is what Place keys a request by: its key (0: none), the
// key of the conversation it belongs under (a subagent's parent: the
// session's main conversation, or the agent that started it; 0 for a main
// conversation), and what identified it.
type conversation struct {
	key, parent uint64
	kind        ConversationKind
	// change and side: what the request does to a known conversation's
	// context (contextOf).
	change contextChange
	side   int
}

// Separators inside what is hashed: a header value cannot hold a NUL
// (http1 refuses control bytes in a head), so a session id never hashes
// like a session and agent pair, and a body's start, which begins with a
// NUL here, never like either.
const (
	agentSep  = "\x00agent\x00"
	bodyKeyOf = "\x00body\x00"
)

// conversationOf is r's conversation (call with m.mu held: the config may
// change under it).
func (m *Model) conversationOf(r Request) conversation {
	switch {
	case r.SessionID != "" && r.AgentID != "":
		c := conversation{key: m.hasher.Hash(r.SessionID + agentSep + r.AgentID), kind: ConvSubagent}
		if r.ParentAgentID != "" && r.ParentAgentID != r.AgentID {
			c.parent = m.hasher.Hash(r.SessionID + agentSep + r.ParentAgentID)
		} else {
			c.parent = m.hasher.Hash(r.SessionID)
		}
		return c
	case r.SessionID != "":
		return conversation{key: m.hasher.Hash(r.SessionID), kind: ConvSession}
	case len(r.BodyStart) > 0 && m.cfg.BodyKey:
		return conversation{key: m.hasher.Hash(bodyKeyOf + string(r.BodyStart)), kind: ConvBody}
	}
	return conversation{}
}

// KeySources say where the shim finds a request's conversation: the
// headers to read and whether the body's start may key it.
type KeySources struct {
	SessionHeaders []string
	AgentHeaders   []string
	BodyKey        bool
}

// KeySources is what the shim reads for this model.
func (m *Model) KeySources() KeySources {
	m.mu.Lock()
	defer m.mu.Unlock()
	return KeySources{SessionHeaders: m.cfg.SessionHeaders, AgentHeaders: m.cfg.AgentHeaders, BodyKey: m.cfg.BodyKey}
}

// SetBodyKey switches keying by the body's start at run time (a reload).
func (m *Model) SetBodyKey(on bool) {
	m.mu.Lock()
	m.cfg.BodyKey = on
	m.mu.Unlock()
}

// Contexts that start over. A conversation's prompt grows every turn; one
// that is suddenly much smaller starts from something else: a compacted
// context (a summary and the new message), a cleared one, or a side
// request under the same session (a title, a summary asked for on the
// side). None of these finds anything cached on the conversation's
// replica but the prefix every conversation shares, so such a request
// goes where load says. Whether the conversation follows it is for its
// next request to say: small too, it continues the new context (the
// conversation moves to where that went); as large as before, it resumes
// the old one (a side request: it stays). A client that says it compacted
// (x-claude-code-context-compacted) is believed at once.

// contextChange is how a known conversation's request relates to the
// context its replica holds.
type contextChange uint8

const (
	sameContext  contextChange = iota // it extends (or repeats) that context
	freshContext                      // it starts over, confirmed: the conversation moves with it
	sideContext                       // it starts over, or is a side request: placed by load, the pin kept
)

// shrinkShare: a prompt under this share of the conversation's last one
// does not extend it.
const shrinkShare = 0.5

// contextOf is what request r does to the context of the conversation at
// pos, and where a smaller prompt of it went just before (-1: none).
func (t *sessionTable) contextOf(pos int, r Request) (contextChange, int) {
	e := &t.slots[pos]
	side := int(e.side) - 1
	switch {
	case r.ContextCompacted:
		return freshContext, side
	case r.PromptBytes <= 0 || e.lastBytes == 0 || float64(r.PromptBytes) >= shrinkShare*float64(e.lastBytes):
		return sameContext, -1
	case side >= 0:
		return freshContext, side // the second small prompt in a row
	}
	return sideContext, -1
}

// noteContext records, at the request's commit, what it did to the
// context of the conversation at pos, placed on replica.
func (t *sessionTable) noteContext(pos int, change contextChange, bytes int64, replica int) {
	e := &t.slots[pos]
	if change == sideContext {
		e.side = uint16(replica + 1)
		return
	}
	e.side = 0
	if bytes > 0 {
		e.lastBytes = uint32(min(bytes, 1<<32-1))
	}
}

// freshReplica is where a conversation whose context starts over goes:
// where its first smaller prompt went (that prompt's prefix is cached
// there) if that replica is healthy and below the spill threshold, else
// the least-loaded one.
func (m *Model) freshReplica(side int) int {
	if side >= 0 && side < len(m.reps) && m.reps[side].healthy && m.reps[side].inFlight < m.spillThreshold(side) {
		return side
	}
	return m.leastLoaded(-1)
}
