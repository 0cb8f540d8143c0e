package placement

import (
	"math"

	"github.com/lmwarden/lmwarden/internal/least"
)

// Policy `sticky-until-saturated` is llm-d's current default, a peer of policy
// cost: keep the session where its prefix is unless that replica's
// predicted TTFT is more than saturationSlack worse than the best
// replica's; otherwise (and for new sessions) score by token load, the
// prompt tokens in flight on each replica.

const saturationSlack = 5.0 // seconds

type stickyUntilSaturatedPolicy struct{}

func newStickyUntilSaturatedPolicy(*Model, ModelOptions) policy { return stickyUntilSaturatedPolicy{} }

func (p stickyUntilSaturatedPolicy) pick(m *Model, h uint64, r Request) int {
	return m.pickBooked(p, h, r)
}

// choose is llm-d's rule; call with m.mu held.
func (stickyUntilSaturatedPolicy) choose(m *Model, s *peerSession, prompt float64, now int64) int {
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
	return least.By(&m.start, len(m.reps), func(i int) (float64, bool) {
		return m.peer.reps[i].inflightCtx + m.reps[i].metrics.Waiting*m.peer.meanUncached, m.reps[i].healthy
	})
}
