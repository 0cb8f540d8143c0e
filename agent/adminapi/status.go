package adminapi

import "time"

// ModelStatus is one model as GET /api/v1/models reports it (and as the CLI,
// the dashboard and the Prometheus collector read it).
type ModelStatus struct {
	Name      string `json:"name"`
	Frontend  string `json:"frontend"`
	Shape     string `json:"shape"` // "replicas" or "endpoint"
	Affinity  bool   `json:"affinity"`
	Policy    string `json:"policy"`           // configured policy
	Effective string `json:"effective_policy"` // what decides now: policy, vllm-lb, or "vllm" (one endpoint, affinity off)
	SpillAuto bool   `json:"spill_threshold_auto"`
	Spill     int    `json:"spill_threshold"` // the number; with auto, the lowest over healthy replicas
	InFlight  int    `json:"in_flight"`
	Sessions  int    `json:"sessions"` // in the table (pinned), at most MaxSessions
	// ActiveSessions: of those, with a request in the last ActiveWindow
	// (lmwarden_sessions_live).
	ActiveSessions  int    `json:"active_sessions"`
	MaxSessions     int    `json:"max_sessions"`
	SessionsEvicted uint64 `json:"sessions_evicted"`
	UntrustedPins   uint64 `json:"untrusted_pins"` // pins from outside pin_sources, ignored
	// StickyShare: of the requests of known sessions, the share that went to
	// the replica their session was pinned to (0 before any).
	StickyShare     float64           `json:"sticky_share"`
	Stayed          uint64            `json:"stayed"`
	Moved           uint64            `json:"moved"`
	Unaffined       uint64            `json:"unaffined"`
	InvalidPins     uint64            `json:"invalid_pins"`
	NoHealthy       uint64            `json:"no_healthy_replica"`
	RetryFailed     uint64            `json:"retry_failed"`
	SessionsExpired uint64            `json:"sessions_expired"`
	Requests        map[string]uint64 `json:"requests"` // by placement kind
	// ConversationRequests counts requests by what keyed their
	// conversation: session, subagent, body (no session header, the
	// body's start), none (nothing: placed by load).
	ConversationRequests map[string]uint64 `json:"conversation_requests"`
	// Conversations counts the conversations in the table by kind
	// (session, subagent, body).
	Conversations map[string]int  `json:"conversations"`
	Replicas      []ReplicaStatus `json:"replicas"`
	Cost          *CostStatus     `json:"cost,omitempty"` // policy cost only (status_cost.go)
	// Answered counts the error responses the warden answered itself, by
	// status code (400, 408, 431, 502, 503, 504, 505).
	Answered map[string]uint64 `json:"answered"`
}

// ReplicaStatus is one replica (or rank) of a model.
type ReplicaStatus struct {
	Index    int    `json:"index"`
	URL      string `json:"url"`
	Healthy  bool   `json:"healthy"`  // the poller's verdict (unhealthy_after failed polls make it false)
	Draining bool   `json:"draining"` // the operator's: no new conversations (PUT .../drain)
	// Reason says why the replica takes no new placements: the drain, or
	// the last failed poll (GET /health refused or its HTTP status, a
	// /metrics without vLLM's series); empty when it takes them.
	Reason         string            `json:"reason,omitempty"`
	InFlight       int               `json:"in_flight"`
	AwaitingBody   int               `json:"awaiting_body"`   // of those, whose body has not arrived (not in load)
	Sessions       int               `json:"sessions"`        // live sessions pinned here
	ActiveSessions int               `json:"active_sessions"` // of those, active in the last ActiveWindow
	Sticky         uint64            `json:"sticky"`
	SpilledIn      uint64            `json:"spilled_in"`
	ClientPinned   uint64            `json:"client_pinned"`
	Requests       map[string]uint64 `json:"requests"` // by placement kind
	RetriedAway    uint64            `json:"retried_away"`
	PollFailures   uint64            `json:"poll_failures"`
	Running        float64           `json:"running"`
	Waiting        float64           `json:"waiting"`
	KVUsed         float64           `json:"kv_used"`
	PrefixHitRate  float64           `json:"prefix_hit_rate"`
	HitRateKnown   bool              `json:"prefix_hit_rate_known"`
	SpillThreshold int               `json:"spill_threshold"`
	Load           float64           `json:"load"`
	ObservedAt     *time.Time        `json:"observed_at,omitempty"`
	// Responses counts the responses relayed from this replica to their
	// end, by the replica's status code.
	Responses map[string]uint64 `json:"responses"`
	Cost      *ReplicaCost      `json:"cost,omitempty"` // policy cost only
}

// CostStatus is the model-wide part.
type CostStatus struct {
	PrefillRate  float64 `json:"prefill_tokens_per_s"` // learned (0: nothing yet, the prior is used)
	MeanUncached float64 `json:"mean_uncached_tokens"` // uncached prompt tokens a request, learned
	PromptTokens float64 `json:"prompt_tokens"`        // the usual prompt size the predictions below assume
	Admission    string  `json:"admission"`            // auto, queue, spill or off
	Parked       int     `json:"parked"`               // requests waiting at the warden now
	// AdmissionState is what admission does now and has done.
	AdmissionState AdmissionState `json:"admission_state"`
}

// AdmissionState is admission's part of GET /api/v1/models.
type AdmissionState struct {
	Engaged      bool     `json:"engaged"`              // requests that find no room wait now
	LiveLoad     float64  `json:"live_load"`            // live context over the caches (average): auto engages above 1.2, lets go under 1.0
	SharedPrefix float64  `json:"shared_prefix_tokens"` // counted once a replica
	OldestWait   float64  `json:"oldest_wait_s"`        // of the requests parked now
	WaitP50      *float64 `json:"wait_p50_s"`           // waits that ended (null: none yet)
	WaitP95      *float64 `json:"wait_p95_s"`
	MaxWait      *float64 `json:"max_wait_s"`
	Timeout      float64  `json:"timeout_s"` // the longest wait
	QueueMax     int      `json:"queue_max"` // more waiting get 503
	Quantum      float64  `json:"quantum"`   // re-prefill times a session keeps its room while others wait
	Waits        uint64   `json:"waits"`     // requests ever parked
	Rejected     uint64   `json:"rejected"`  // refused with 503, queue full
	TimedOut     uint64   `json:"timed_out"` // placed at the timeout
	Yields       uint64   `json:"yields"`    // rooms given up after a quantum
	Evicted      uint64   `json:"evicted"`   // rooms taken for a request at its timeout or a grown session
	Released     uint64   `json:"released"`  // rooms of sessions that had likely ended, given to a waiter
}

// ReplicaCost is one replica's part.
type ReplicaCost struct {
	PredictedTTFT float64 `json:"predicted_ttft_s"`   // for a new session of PromptTokens, now
	Capacity      float64 `json:"kv_capacity_tokens"` // as placement uses it
	Live          float64 `json:"live_tokens"`        // context of the live sessions held here (the shared prefix once)
	Budget        float64 `json:"live_budget_tokens"` // what they may hold: fill × capacity
	Backlog       float64 `json:"backlog_tokens"`     // predicted prefill still queued
}
