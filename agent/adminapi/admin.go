package adminapi

import (
	"errors"
	"time"
)

// ModelsResponse is the body of GET /api/v1/models.
type ModelsResponse struct {
	Models []ModelStatus `json:"models"`
}

// SessionsResponse is the body of GET /api/v1/sessions: one page.
type SessionsResponse struct {
	// Total is the number of live sessions over the listed models; Sessions
	// holds at most limit of them.
	Total    int           `json:"total"`
	Sessions []SessionInfo `json:"sessions"`
	// Next is the ?after= of the next page ("": this was the last).
	Next string `json:"next,omitempty"`
}

// AffinityRequest is the body of PUT /api/v1/models/{name}/affinity.
type AffinityRequest struct {
	Affinity *bool `json:"affinity"`
}

// PolicyRequest is the body of PUT /api/v1/models/{name}/policy.
type PolicyRequest struct {
	Policy string `json:"policy"`
}

// DrainRequest is the body of PUT
// /api/v1/models/{name}/replicas/{index}/drain.
type DrainRequest struct {
	Drain *bool `json:"drain"`
}

// SessionInfo is one live session as the admin API shows it: the keyed hash
// only, never the raw id.
type SessionInfo struct {
	Model string `json:"model"`
	Hash  string `json:"hash"` // 16 hex digits
	// Kind is what keys the conversation: session (a session header),
	// subagent (a session and an agent header), body (the body's stable
	// start, no session header).
	Kind string `json:"kind,omitempty"`
	// Parent is the hash of the conversation a subagent belongs under
	// (its session's main conversation, or the agent that started it).
	Parent   string    `json:"parent,omitempty"`
	Replica  int       `json:"replica"`
	LastSeen time.Time `json:"last_seen"`
	Turns    uint32    `json:"turns"`
	// Active: a request within the last ActiveWindow (counts toward load).
	Active bool `json:"active"`
}

// ErrUnknownModel: no model has that name (admin API: 404).
var ErrUnknownModel = errors.New("unknown model")

// GET /api/v1/sessions reads one page: DefaultSessionsLimit sessions
// without ?limit=, at most SessionsPageMax with it. A page costs the
// warden a scan of its table and about 200 bytes of JSON a session, so a
// read, whatever it asks, takes a bounded share of its memory; a client
// that wants them all follows next.
const (
	DefaultSessionsLimit = 100
	SessionsPageMax      = 1000
)
