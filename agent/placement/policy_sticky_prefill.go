package placement

import (
	"math"

	"github.com/lmwarden/lmwarden/internal/least"
)

// Policy sticky's spill on queued prefill (`spill_threshold: prefill`).
// The count of requests in flight says little about how long a turn waits
// on its replica: an H200 batches 40 conversations, and one turn that adds
// 100K new tokens to its context holds every turn behind it for seconds
// while the replica's count stays far under the threshold. So sticky books
// its placements in the cost model (costmodel.go: the prefill queued on
// each replica, what LRU still holds of each conversation) and moves a
// known conversation's turn when its predicted time to first token on its
// own replica (the prefill queued ahead of it there plus its uncached
// part) exceeds the best other replica's (that replica's queue plus the
// whole prompt less the shared prefix: what moving costs) by
// max(prefillSpillAbs, prefillSpillRel of its own). The conversation moves
// with it: the replica that computed its latest turn holds its newest
// context.
//
// The margin is wide on purpose. On the Mooncake trace at its saturating
// speed (8 H200s), a move for a prediction 50% better (or 1 s) took 20% of
// later turns off their replica and the hit rate fell from 95% to 86% of
// what the replicas' caches allow; 70% better (or 3 s) moves 3% and keeps
// 94%. Moving a long conversation re-prefills all of it, and where the
// caches overflow that work is taken from everyone's throughput
// (docs/notes/2026-12-06-conversations.md, "Spilling on queued prefill").

const (
	prefillSpillAbs = 3.0 // seconds
	prefillSpillRel = 0.7
)

// prefillSpill returns where the turn of conversation h, pinned on replica
// p, should go instead, or -1 to stay; call with m.mu held.
func (m *Model) prefillSpill(h uint64, p int, r Request) int {
	s := m.peer.sessions[h]
	if s == nil || s.replica != p || s.inflight > 0 || m.oversize(r) {
		return -1 // the cost model does not know where its cache is, or a turn of it runs there
	}
	now := r.Now.UnixNano()
	prompt := m.promptTokens(r)
	stay := m.predictTTFT(p, s, prompt, now)
	ts := m.peerScratch()
	bestT := math.Inf(1)
	for i := range m.reps {
		ts[i] = math.Inf(1)
		if i != p && m.reps[i].healthy {
			ts[i] = m.predictTTFT(i, s, prompt, now)
			bestT = math.Min(bestT, ts[i])
		}
	}
	if bestT >= stay-math.Max(prefillSpillAbs, prefillSpillRel*stay) {
		return -1
	}
	slack := math.Max(tieSlackAbs, tieSlackRel*bestT)
	return least.By(&m.start, len(m.reps), func(i int) (float64, bool) {
		return m.load(i), ts[i] <= bestT+slack
	})
}

// peerScratch is a per-replica slice to reuse; call with m.mu held.
func (m *Model) peerScratch() []float64 {
	n := len(m.reps)
	if cap(m.peer.scratch) < n {
		m.peer.scratch = make([]float64, n)
	}
	return m.peer.scratch[:n]
}

// stickyBook books sticky's placement p of request r in the cost model,
// as the cost-aware policies book theirs (pickBooked); call with m.mu held.
func (m *Model) stickyBook(p Placement, r Request) {
	if p.Replica < 0 {
		return
	}
	m.peerSweep(r.Now.UnixNano(), peerSweepStep)
	m.book(p.SessionHash, p.Replica, r)
}
