package placement

import (
	"strconv"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
)

// Status snapshots the model.
func (m *Model) Status() adminapi.ModelStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := adminapi.ModelStatus{
		Name:                 m.cfg.Name,
		Frontend:             m.cfg.Frontend,
		Shape:                "replicas",
		Affinity:             m.affinity,
		Policy:               string(m.policy),
		Effective:            string(m.policy),
		SpillAuto:            m.cfg.SpillThreshold.Auto,
		InFlight:             m.inFlight,
		Sessions:             m.sessions.len(),
		ActiveSessions:       m.sessions.live(),
		MaxSessions:          m.sessions.max,
		SessionsEvicted:      m.sessions.evicted,
		UntrustedPins:        m.untrustedPins,
		Stayed:               m.stayed,
		Moved:                m.moved,
		Unaffined:            m.unaffined,
		InvalidPins:          m.invalidPins,
		NoHealthy:            m.noHealthy,
		RetryFailed:          m.retryFailed,
		SessionsExpired:      m.sessions.expired,
		Requests:             map[string]uint64{},
		ConversationRequests: make(map[string]uint64, NumConversationKinds),
		Conversations:        make(map[string]int, NumConversationKinds-1),
	}
	for k := range NumConversationKinds {
		s.ConversationRequests[k.String()] = m.keyed[k]
		if k != ConvNone {
			s.Conversations[k.String()] = m.sessions.kinds[k]
		}
	}
	if m.oneEndpoint {
		s.Shape = "endpoint"
	}
	if !m.affinity {
		s.Effective = string(config.PolicyVLLMLB)
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
		rs := adminapi.ReplicaStatus{
			Index:          i,
			URL:            r.url,
			Healthy:        r.up,
			Draining:       r.draining,
			Reason:         m.unhealthyReason(i),
			InFlight:       r.inFlight + r.awaitingBody,
			AwaitingBody:   r.awaitingBody,
			Sessions:       m.sessions.pinned[i],
			ActiveSessions: m.sessions.active[i],
			Sticky:         r.requests[KindSticky],
			SpilledIn:      r.requests[KindSpilled],
			ClientPinned:   r.requests[KindClientPinned],
			Requests:       make(map[string]uint64, NumKinds),
			RetriedAway:    r.retriedAway,
			PollFailures:   r.pollFailures,
			Running:        r.metrics.Running,
			Waiting:        r.metrics.Waiting,
			KVUsed:         r.metrics.KVUsage,
			SpillThreshold: m.spillThreshold(i),
			Load:           m.load(i),
		}
		rs.PrefixHitRate, rs.HitRateKnown = r.hitRate.value()
		if r.observed {
			t := r.observedAt
			rs.ObservedAt = &t
		}
		for k := range NumKinds {
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
	lat := m.Latency()
	s.Answered = CodeCounts(lat.Answered)
	for i := range s.Replicas {
		s.Replicas[i].Responses = CodeCounts(lat.Statuses[i])
	}
	m.costStatus(&s, time.Now().UnixNano())
	return s
}

// VLLMDecided counts the requests of a one-endpoint model forwarded with
// affinity off: no rank header, vLLM's own balancer chose.
func (m *Model) VLLMDecided() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vllmDecided
}

// ReplicaMetrics is what the last poll of replica i read from its
// /metrics (the zero value before any).
func (m *Model) ReplicaMetrics(i int) ReplicaMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reps[i].metrics
}

// CodeCounts keys counts by the status code as text (JSON object keys).
func CodeCounts(byCode map[int]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(byCode))
	for c, n := range byCode {
		out[strconv.Itoa(c)] = n
	}
	return out
}
