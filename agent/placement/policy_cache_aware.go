package placement

import (
	"math"

	"github.com/lmwarden/lmwarden/internal/least"
)

// Policy `cache-aware` is SGLang's router ("cache_aware"), a peer of policy
// cost modelled on what that router ships, so that the comparison in
// docs/placement.md is honest: if the load is imbalanced (max-min >
// balanceAbs and max > balanceRel*min requests in flight), the
// least-loaded replica; else the replica whose radix tree matches the most
// of the request's text when that match exceeds cacheThreshold of it, else
// the replica with the smallest tree. The shim sees only request heads, so
// the match is modelled on session identity and prompt size: the session's
// replica matches the context the router sent there before (no eviction in
// the router's tree, as in SGLang's approximate tree between its own
// prunes), any other matches nothing; a replica's tree size is the context
// of the live sessions routed there.

const (
	balanceAbs     = 64
	balanceRel     = 1.5
	cacheThreshold = 0.3
)

type cacheAwarePolicy struct{}

func newCacheAwarePolicy(*Model, ModelOptions) policy { return cacheAwarePolicy{} }

func (p cacheAwarePolicy) pick(m *Model, h uint64, r Request) int { return m.pickBooked(p, h, r) }

// choose is SGLang's rule; call with m.mu held.
func (cacheAwarePolicy) choose(m *Model, s *peerSession, prompt float64, _ int64) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range m.reps {
		if !m.reps[i].healthy {
			continue
		}
		l := float64(m.reps[i].inFlight)
		lo, hi = math.Min(lo, l), math.Max(hi, l)
	}
	if hi-lo > balanceAbs && hi > balanceRel*lo {
		return least.By(&m.start, len(m.reps), func(i int) (int, bool) { return m.reps[i].inFlight, m.reps[i].healthy })
	}
	if s != nil && s.replica >= 0 && m.reps[s.replica].healthy && prompt > 0 && s.ctx/prompt > cacheThreshold {
		return s.replica
	}
	return least.By(&m.start, len(m.reps), func(i int) (float64, bool) { return m.peer.reps[i].live, m.reps[i].healthy })
}
