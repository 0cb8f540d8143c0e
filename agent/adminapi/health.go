package adminapi

import "time"

// BuildInfo says which build of the warden runs (lmwarden --version, the
// metric lmwarden_build_info, GET /api/v1/warden).
type BuildInfo struct {
	Version   string `json:"version"`            // release (ldflags) or module version, else "devel"
	Revision  string `json:"revision,omitempty"` // VCS commit, "-dirty" when the tree was modified
	GoVersion string `json:"go_version"`
}

// DatapathInfo is the datapath serve runs with and why (auto says what it found).
type DatapathInfo struct {
	Name   string `json:"name"` // "msg", "skb" or "user"; "" when no shim runs (tests)
	Reason string `json:"reason,omitempty"`
}

// WardenInfo is the body of GET /api/v1/warden.
type WardenInfo struct {
	Build     BuildInfo    `json:"build"`
	StartedAt time.Time    `json:"started_at"`
	Datapath  DatapathInfo `json:"datapath"`
	// AdminTokenFile is where the admin token is (not the token): what
	// the dashboard tells a user whose write it refused.
	AdminTokenFile string `json:"admin_token_file,omitempty"`
	Readiness
}

// Readiness is the body of GET /readyz. The warden is ready when its
// frontends listen (SetServing) and every model has at least one replica
// that is healthy and has answered a poll: a client sent to it then gets
// an answer, not a 503. It is not ready again from the start of a
// shutdown, so a balancer in front stops sending new connections while
// the requests in flight finish.
type Readiness struct {
	Ready   bool             `json:"ready"`
	Reasons []string         `json:"reasons,omitempty"` // why not, one line each
	Models  []ModelReadiness `json:"models"`
}

// ModelReadiness counts one model's replicas that take placements.
type ModelReadiness struct {
	Name     string `json:"name"`
	Ready    int    `json:"ready_replicas"` // healthy and polled at least once
	Replicas int    `json:"replicas"`
	// Unready says, one line a replica, why each of the others takes no
	// placements: `replica 1 (URL): GET /health: HTTP 503 Service
	// Unavailable`, a drain, or not polled yet.
	Unready []string `json:"unready,omitempty"`
}
