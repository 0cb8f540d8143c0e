package l7

import (
	"strings"

	"github.com/lmwarden/lmwarden/l7/http1"
)

// RoutingKey is what the shim learns from a request head for placement.
type RoutingKey struct {
	SessionID    string // raw id from the first session header present; "" if none. Never logged.
	PinnedHeader string // value of RankHeader or ReplicaHeader, "" if neither
	PromptBytes  int64  // Content-Length; 0 when chunked or absent
}

// RoutingKeyOf reads the routing key from h. sessionHeaders are tried in
// order and the first one present with a non-empty value wins, so a model
// can prefer X-Claude-Code-Session-Id over a generic X-Session-Id.
func RoutingKeyOf(h *http1.Head, sessionHeaders []string) RoutingKey {
	var k RoutingKey
	for _, name := range sessionHeaders {
		if v, ok := h.Get(name); ok && v != "" {
			k.SessionID = v
			break
		}
	}
	for _, f := range h.Headers {
		if strings.EqualFold(f.Name, http1.RankHeader) || strings.EqualFold(f.Name, http1.ReplicaHeader) {
			k.PinnedHeader = f.Value
			break
		}
	}
	if h.Framing == http1.FramingLength {
		k.PromptBytes = h.ContentLength
	}
	return k
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
