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
