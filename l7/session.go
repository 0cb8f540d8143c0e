package l7

import (
	"errors"
	"strings"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/bodykey"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// ParentAgentHeader names the agent that started a subagent's (Claude
// Code sends it on the requests of a subagent that another subagent
// started). It only says where the conversation belongs.
const ParentAgentHeader = "X-Claude-Code-Parent-Agent-Id"

// ContextCompactedHeader says that a conversation's context was compacted:
// the request starts over from a summary (Claude Code sends it where it
// sends its gateway hints: docs/claude-code.md).
const ContextCompactedHeader = "X-Claude-Code-Context-Compacted"

// RoutingKey is what the shim learns from a request head (and the body
// bytes that came with it) for placement. Raw ids are never logged.
type RoutingKey struct {
	SessionID     string // raw id from the first session header present; "" if none
	AgentID       string // raw id from the first agent header present; "" if none
	ParentAgentID string // ParentAgentHeader's value; "" if none
	// ContextCompacted: ContextCompactedHeader is present with a value.
	ContextCompacted bool
	// BodyStart is the body's stable start (l7/bodykey), read only when
	// there is no session id and the model keys by the body; nil when the
	// bytes held do not reach it (BodyShort) or the body has none.
	BodyStart    []byte
	BodyShort    bool   // the start lies beyond the bytes held
	PinnedHeader string // value of RankHeader or ReplicaHeader, "" if neither
	PromptBytes  int64  // Content-Length; 0 when chunked or absent
}

// RoutingKeyOf reads the routing key from h and, for a request without a
// session id whose body has a Content-Length, from body, the bytes of it
// the shim already holds (nothing more is read for it; a chunked body is
// not keyed). The header lists are tried in order and
// the first one present with a non-empty value wins, so a model can
// prefer X-Claude-Code-Session-Id over a generic X-Session-Id.
func RoutingKeyOf(h *http1.Head, src placement.KeySources, body []byte) RoutingKey {
	var k RoutingKey
	k.SessionID = firstHeader(h, src.SessionHeaders)
	if k.SessionID != "" {
		k.AgentID = firstHeader(h, src.AgentHeaders)
		if k.AgentID != "" {
			k.ParentAgentID, _ = h.Get(ParentAgentHeader)
		}
		v, _ := h.Get(ContextCompactedHeader)
		k.ContextCompacted = v != ""
	}
	for _, f := range h.Headers {
		if strings.EqualFold(f.Name, http1.RankHeader) || strings.EqualFold(f.Name, http1.ReplicaHeader) {
			k.PinnedHeader = f.Value
			break
		}
	}
	if h.Framing != http1.FramingLength {
		return k // a chunked body's bytes are not the JSON's (and no body has no start)
	}
	k.PromptBytes = h.ContentLength
	if k.SessionID == "" && src.BodyKey {
		start, err := bodykey.Start(body[:min(int64(len(body)), h.ContentLength)])
		k.BodyStart, k.BodyShort = start, errors.Is(err, bodykey.ErrShort)
	}
	return k
}

func firstHeader(h *http1.Head, names []string) string {
	for _, name := range names {
		if v, ok := h.Get(name); ok && v != "" {
			return v
		}
	}
	return ""
}

// inferencePaths are the API paths whose POST is a prompt for the model
// (Anthropic's messages, OpenAI's chat completions, completions and
// responses, as vLLM serves them). Only such a request enters the
// session table (placement.Request.NonInference): a health check, a
// model list, a token count or metrics with a session header follow no
// pin and make none.
var inferencePaths = map[string]bool{
	"/v1/messages":         true,
	"/v1/chat/completions": true,
	"/v1/completions":      true,
	"/v1/responses":        true,
}

// isInference reports whether h is a prompt for the model.
func isInference(h *http1.Head) bool {
	if h.Method != "POST" {
		return false
	}
	path, _, _ := strings.Cut(h.Target, "?")
	return inferencePaths[path]
}
