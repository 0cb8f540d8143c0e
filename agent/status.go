package agent

import (
	"strconv"
	"time"
)

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
	Replicas        []ReplicaStatus   `json:"replicas"`
	Cost            *CostStatus       `json:"cost,omitempty"` // policy cost only (status_cost.go)
	// Answered counts the error responses the warden answered itself, by
	// status code (400, 408, 431, 502, 503, 504, 505).
	Answered map[string]uint64 `json:"answered"`
}

// ReplicaStatus is one replica (or rank) of a model.
type ReplicaStatus struct {
	Index          int               `json:"index"`
	URL            string            `json:"url"`
	Healthy        bool              `json:"healthy"`
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
	Metrics        ReplicaMetrics    `json:"-"`
	// Responses counts the responses relayed from this replica to their
	// end, by the replica's status code.
	Responses map[string]uint64 `json:"responses"`
	Cost      *ReplicaCost      `json:"cost,omitempty"` // policy cost only
}

// Status snapshots the model.
func (m *Model) Status() ModelStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := ModelStatus{
		Name:            m.cfg.Name,
		Frontend:        m.cfg.Frontend,
		Shape:           "replicas",
		Affinity:        m.affinity,
		Policy:          string(m.policy),
		Effective:       string(m.policy),
		SpillAuto:       m.cfg.SpillThreshold.Auto,
		InFlight:        m.inFlight,
		Sessions:        m.sessions.len(),
		ActiveSessions:  m.sessions.live(),
		MaxSessions:     m.sessions.max,
		SessionsEvicted: m.sessions.evicted,
		UntrustedPins:   m.untrustedPins,
		Stayed:          m.stayed,
		Moved:           m.moved,
		Unaffined:       m.unaffined,
		InvalidPins:     m.invalidPins,
		NoHealthy:       m.noHealthy,
		RetryFailed:     m.retryFailed,
		SessionsExpired: m.sessions.expired,
		Requests:        map[string]uint64{},
	}
	if m.oneEndpoint {
		s.Shape = "endpoint"
	}
	if !m.affinity {
		s.Effective = string(PolicyVLLMLB)
		if m.oneEndpoint {
			s.Effective = "vllm"
		}
	}
	if t := m.stayed + m.moved; t > 0 {
		s.StickyShare = float64(m.stayed) / float64(t)
	}
	s.Spill = -1
	for i := range m.reps {
		r := &m.reps[i]
		rs := ReplicaStatus{
			Index:          i,
			URL:            r.url,
			Healthy:        r.healthy,
			InFlight:       r.inFlight + r.awaitingBody,
			AwaitingBody:   r.awaitingBody,
			Sessions:       m.sessions.pinned[i],
			ActiveSessions: m.sessions.active[i],
			Sticky:         r.requests[KindSticky],
			SpilledIn:      r.requests[KindSpilled],
			ClientPinned:   r.requests[KindClientPinned],
			Requests:       make(map[string]uint64, numKinds),
			RetriedAway:    r.retriedAway,
			PollFailures:   r.pollFailures,
			Running:        r.metrics.Running,
			Waiting:        r.metrics.Waiting,
			KVUsed:         r.metrics.KVUsage,
			SpillThreshold: m.spillThreshold(i),
			Load:           m.load(i),
			Metrics:        r.metrics,
		}
		rs.PrefixHitRate, rs.HitRateKnown = r.hitRate.value()
		if r.observed {
			t := r.observedAt
			rs.ObservedAt = &t
		}
		for k := range numKinds {
			rs.Requests[k.String()] = r.requests[k]
			s.Requests[k.String()] += r.requests[k]
		}
		if r.healthy && (s.Spill < 0 || rs.SpillThreshold < s.Spill) {
			s.Spill = rs.SpillThreshold
		}
		s.Replicas = append(s.Replicas, rs)
	}
	s.Requests[KindBalanced.String()] += m.vllmDecided
	if s.Spill < 0 {
		s.Spill = m.spillThreshold(0)
	}
	lat := m.latencySnapshot()
	s.Answered = codeCounts(lat.answered)
	for i := range s.Replicas {
		s.Replicas[i].Responses = codeCounts(lat.statuses[i])
	}
	m.costStatus(&s, time.Now().UnixNano())
	return s
}

// codeCounts keys counts by the status code as text (JSON object keys).
func codeCounts(byCode map[int]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(byCode))
	for c, n := range byCode {
		out[strconv.Itoa(c)] = n
	}
	return out
}
