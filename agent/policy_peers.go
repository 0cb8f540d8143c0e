package agent

import "math"

// Two peers of policy cost, modelled on what other routers ship, so that
// the comparison in docs/placement.md is honest.

const (
	// PolicyCacheAware is SGLang's router ("cache_aware"): if the load is
	// imbalanced (max-min > balanceAbs and max > balanceRel*min requests
	// in flight), the least-loaded replica; else the replica whose radix
	// tree matches the most of the request's text when that match exceeds
	// cacheThreshold of it, else the replica with the smallest tree. The
	// shim sees only request heads, so the match is modelled on session
	// identity and prompt size: the session's replica matches the context
	// the router sent there before (no eviction in the router's tree, as in
	// SGLang's approximate tree between its own prunes), any other matches
	// nothing; a replica's tree size is the context of the live sessions
	// routed there.
	PolicyCacheAware Policy = "cache-aware"
	// PolicyStickyUntilSaturated is llm-d's current default: keep the
	// session where its prefix is unless that replica's predicted TTFT is
	// more than saturationSlack worse than the best replica's; otherwise
	// (and for new sessions) score by token load, the prompt tokens in
	// flight on each replica.
	PolicyStickyUntilSaturated Policy = "sticky-until-saturated"
)

const (
	balanceAbs      = 64
	balanceRel      = 1.5
	cacheThreshold  = 0.3
	saturationSlack = 5.0 // seconds
)

// pickCacheAware is SGLang's rule; call with m.mu held.
func (m *Model) pickCacheAware(s *peerSession, prompt float64) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range m.reps {
		if !m.reps[i].healthy {
			continue
		}
		l := float64(m.reps[i].inFlight)
		lo, hi = math.Min(lo, l), math.Max(hi, l)
	}
	if hi-lo > balanceAbs && hi > balanceRel*lo {
		return m.leastInFlight()
	}
	if s != nil && s.replica >= 0 && m.reps[s.replica].healthy && prompt > 0 && s.ctx/prompt > cacheThreshold {
		return s.replica
	}
	best, bestTree := -1, 0.0
	n := len(m.reps)
	for k := range n {
		i := (m.start + k) % n
		if !m.reps[i].healthy {
			continue
		}
		if t := m.peer.reps[i].live; best < 0 || t < bestTree {
			best, bestTree = i, t
		}
	}
	m.start = (m.start + 1) % n
	return best
}

// leastInFlight is the healthy replica with the fewest warden requests.
func (m *Model) leastInFlight() int {
	best := -1
	n := len(m.reps)
	for k := range n {
		i := (m.start + k) % n
		if m.reps[i].healthy && (best < 0 || m.reps[i].inFlight < m.reps[best].inFlight) {
			best = i
		}
	}
	m.start = (m.start + 1) % n
	return best
}

// pickStickyUntilSaturated is llm-d's rule; call with m.mu held.
func (m *Model) pickStickyUntilSaturated(s *peerSession, prompt float64, now int64) int {
	if s != nil && s.replica >= 0 && m.reps[s.replica].healthy {
		stay := m.predictTTFT(s.replica, s, prompt, now)
		best := math.Inf(1)
		for i := range m.reps {
			if m.reps[i].healthy {
				best = math.Min(best, m.predictTTFT(i, s, prompt, now))
			}
		}
		if stay <= best+saturationSlack {
			return s.replica
		}
	}
	best, bestLoad := -1, 0.0
	n := len(m.reps)
	for k := range n {
		i := (m.start + k) % n
		if !m.reps[i].healthy {
			continue
		}
		load := m.peer.reps[i].inflightCtx + m.reps[i].metrics.Waiting*m.peer.meanUncached
		if best < 0 || load < bestLoad {
			best, bestLoad = i, load
		}
	}
	m.start = (m.start + 1) % n
	return best
}
