package placement

import "math"

// What a replica's prefix cache still holds of a session (held): vLLM
// frees the blocks of a finished request into a queue ordered by last
// use and takes the least recently used one whenever a request needs a
// new block, so a session idle on its replica loses its history once the
// new blocks allocated there since its last turn exceed the room left
// beside the blocks used more recently than its own.
//
// The clock (peerRep.touched) counts the tokens that took new blocks:
// from the replica's counters, prompt tokens less prefix hits (the part
// each prefill computed) plus the tokens generated. Prefix hits take no
// new block: counted, they would make a session idle through its agent's
// tool time look evicted while its cache still holds it (docs/placement.md,
// "Liveness"). A replica that exports no counters is clocked by the prompt
// tokens placed on it, the only count the warden has there.
//
// The blocks used more recently than s's are those of the sessions live
// on its replica whose latest turn came after s's (each context once,
// less the shared prefix, which every session keeps hot, and less what
// its turn computed, which took new blocks and is on the clock already):
// they are evicted after s's, and the new blocks eat into what is left.

// lruAdvance moves r's clock by one poll's new blocks; call with the
// poll's metrics s, after a previous poll, when no counter went down.
func (m *Model) lruAdvance(pr *peerRep, s ReplicaMetrics) {
	if s.PromptTokens <= 0 {
		return
	}
	pr.allocCounted = true
	computed := (s.PromptTokens - pr.prev.PromptTokens) - (s.PrefixHits - pr.prev.PrefixHits)
	generated := s.GenerationTokens - pr.prev.GenerationTokens
	pr.touched += math.Max(0, computed) + math.Max(0, generated)
}

// lruHeld is held(s) for a session with no request in flight.
func (m *Model) lruHeld(s *peerSession) float64 {
	pr := &m.peer.reps[s.replica]
	since := pr.touched - s.touchedAt
	shared := math.Min(m.peer.sharedPrefix, s.ctx)
	recent := 0.0
	for _, x := range pr.holders {
		if x != s && max(x.lastPlace, x.lastEnd) > s.lastEnd {
			// what its latest turn found cached: the part it computed
			// took new blocks, which the clock counts already
			recent += math.Max(0, x.ctx-shared-x.pending)
		}
	}
	room := m.capacity(s.replica) - shared - recent - since
	return shared + math.Max(0, math.Min(s.ctx-shared, room))
}
