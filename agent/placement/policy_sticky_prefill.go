package placement

import (
	"math"

	"github.com/lmwarden/lmwarden/internal/least"
)

// Policy sticky's spill on queued prefill (`spill_threshold: prefill`, the
// default). The count of requests in flight says little about how long a
// turn waits on its replica: an H200 batches 40 conversations, and one
// turn that adds 100K new tokens to its context holds every turn behind it
// for seconds while the replica's count stays far under the threshold. So
// sticky reads the cost model it books its placements in (policy_sticky.go;
// costmodel.go: the prefill queued on each replica, what LRU still holds of
// each conversation) and moves a known conversation's turn when its
// predicted time to first token on its own replica (the prefill queued
// ahead of it there plus the part of it not cached there by the time it
// runs, predictStay) exceeds the best other
// replica's (that replica's queue plus the whole prompt less the shared
// prefix: what moving costs) by max(prefillSpillAbs, prefillSpillRel of
// its own). The conversation moves with it: the replica that computed its
// latest turn holds its newest context.
//
// The margin is wide on purpose. On the Mooncake trace at its saturating
// speed (8 H200s), a move for a prediction 50% better (or 1 s) took 20% of
// later turns off their replica and the hit rate fell from 95% to 86% of
// what the replicas' caches allow; 60% (or 2 s) kept 89%, 70% (or 3 s)
// 94%. Moving a long conversation re-prefills all of it, and where the
// caches overflow that work is taken from everyone's throughput
// (docs/notes/2026-12-06-conversations.md, "Spilling on queued prefill").
// On the Claude Code workload 65% and 70% gave the same tail, pooled over
// five seeds (docs/notes/2026-12-07-queued-prefill.md).
//
// Not while cache-capacity admission is engaged (the live conversations
// outgrow the caches): then every move re-prefills a whole conversation
// into a full cache, evicting someone else's, and admission already
// decides where conversations start and resume (policy_sticky_admission.go).
// On eight H200s at twice the cache, moving anyway cost 7.5% of output
// tokens and 4 points of hit rate over five seeds; standing down, 2.6% and
// 1.4 with the same tail (docs/notes/2026-12-07-queued-prefill.md).

const (
	prefillSpillAbs = 3.0 // seconds
	prefillSpillRel = 0.7
)

// prefillSpill returns where the turn of conversation h, pinned on replica
// p, should go instead, or -1 to stay; call with m.mu held.
func (m *Model) prefillSpill(h uint64, p int, r Request) int {
	s := m.cachedOn(h, p, r)
	if s == nil || s.inflight > 0 {
		return -1 // the cost model does not know where its cache is, or a turn of it runs there
	}
	if m.peer.admission.engaged {
		return -1 // the caches overflow: admission decides where conversations live (above)
	}
	now := r.Now.UnixNano()
	prompt := m.promptTokens(r)
	stay := m.predictStay(p, s, prompt, now)
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

// heldAtRunBelow is the live load under which predictStay counts what a
// turn's replica will have evicted of it. Forty seeds a cell (four and
// eight H200s, 1x and 2x the cache; docs/notes/2026-12-07-forty-seeds.md):
// under 1 the TTFT p95 on four replicas at 1x fell 12% but on eight at 2x
// rose 17%, with output −2% at 2x: in a 2x run the live load climbs
// through 0.8-1 during the first minutes, and the moves made then cost the
// rest of the run. Under 0.8 the 1x gain stays (p95 −12%, p99 −12%;
// −9% and −6% over sixty seeds) and 2x is within noise (p95 1.00x and
// 1.06x, output 0.99x); under 0.7 the 1x gain is gone (p95 −3%).
const heldAtRunBelow = 0.8

// predictStay is predictTTFT of conversation s's turn on its own replica
// p, counting what p will have evicted of it by the time the turn runs
// (heldAtRun): held, taken when its last turn ended, does not see the
// prefill queued ahead of it since nor the contexts in flight there, which
// take its blocks while it waits. On four H200s at 1x the cache (seed 8)
// four conversations of 110K-200K on one replica were predicted cached
// (203,829 held of a 203,730-token prompt) while they re-prefilled
// 89K-182K each there, queued behind one another for 44-74 s
// (docs/notes/2026-12-07-queued-prefill.md, "A replica that thrashes").
// Only while the live contexts fill under heldAtRunBelow of the caches'
// total (admission's live load, averaged): then a replica that evicts is a
// local imbalance a move fixes. Near or over the total every replica
// evicts, and moving the turn re-prefills it elsewhere too, taking the
// work from everyone's output; there the prediction keeps what LRU holds
// now. Call with m.mu held.
func (m *Model) predictStay(p int, s *peerSession, prompt float64, now int64) float64 {
	t := m.predictTTFT(p, s, prompt, now)
	if m.peer.admission.loadAvg >= heldAtRunBelow {
		return t // every replica evicts, or soon will (above)
	}
	lost := math.Max(0, prompt-m.heldAtRun(s, now)) - math.Max(0, prompt-m.held(s))
	return t + lost/m.prefillRate(p)
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
	now := r.Now.UnixNano()
	m.peerSweep(now, peerSweepStep)
	if s := m.book(p.SessionHash, p.Replica, r); s != nil && m.peer.admission.engaged && m.admissionPlaces(r) {
		m.keepWithin(p.Replica, s, now) // as pickBooked does
	}
}

// countSpillCostsMore says whether the count threshold's spill of the
// turn of conversation h from its replica p to replica to would be
// predicted slower than staying (the prefill queued at p plus its
// uncached part, against to's queue plus the whole prompt less the shared
// prefix); with `spill_threshold: prefill` such a spill does not happen.
// A replica with many requests in flight is not slow for a conversation
// whose context is long: re-prefilling 150K tokens elsewhere takes longer
// than most queues it would leave. On the Claude Code workload, ten seeds
// pooled, this cut the TTFT p95 at twice the cache by 8% and 20% (four and
// eight H200s) with 8% and 5% more output tokens
// (docs/notes/2026-12-07-queued-prefill.md, "The count's spill, priced");
// call with m.mu held.
func (m *Model) countSpillCostsMore(h uint64, p, to int, r Request) bool {
	if !m.cfg.SpillThreshold.Prefill {
		return false
	}
	s := m.cachedOn(h, p, r)
	if s == nil {
		return false // the cost model does not know where its cache is
	}
	now := r.Now.UnixNano()
	prompt := m.promptTokens(r)
	return m.predictTTFT(to, s, prompt, now) > m.predictTTFT(p, s, prompt, now)
}

// cachedOn is conversation h's cost-model record when it places h's cache
// on replica p and r's prompt fits some cache, else nil: the two spills
// above predict a turn's time at home only then; call with m.mu held.
func (m *Model) cachedOn(h uint64, p int, r Request) *peerSession {
	s := m.peer.sessions[h]
	if s == nil || s.replica != p || m.oversize(r) {
		return nil
	}
	return s
}
