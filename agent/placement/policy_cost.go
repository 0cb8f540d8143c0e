package placement

import (
	"math"
	"time"

	"github.com/lmwarden/lmwarden/internal/least"
)

// Policy `cost` (docs/placement.md): send each request to the replica with
// the lowest predicted time to first token,
//
//		ttft(r) = wait(r) + kvWait(r) + uncached(s, r) / rate(r) (+ hysteresis off s's replica)
//
//	  - wait(r): prefill work queued ahead on r. The warden adds each request's
//	    predicted uncached tokens to r's backlog when it places it and drains
//	    the backlog at rate(r), never keeping more than the predicted uncached
//	    tokens of the requests still in flight there; the replica's own
//	    waiting gauge (other clients' traffic) is a floor.
//	  - kvWait(r): when the context of r's requests in flight plus this prompt
//	    exceeds r's KV capacity, vLLM admits the request only as running ones
//	    finish: the overflow's share of capacity times the mean time a request
//	    stays in flight on r.
//	  - uncached(s, r): on the replica that holds s (its last turn ran there)
//	    only what LRU eviction has taken since; the warden estimates that from
//	    the prompt tokens placed on r since s's last turn (an LRU stack
//	    distance); on any other replica, the whole prompt less the shared
//	    prefix every replica holds.
//	  - rate: prefill tokens a second, learned from the replicas' counters
//	    (prompt tokens minus prefix hits over time while it had a queue, or
//	    over its time-to-first-token sum while it had none), over the last
//	    rateWindow of time.
//
// A session whose replica has evicted most of its cache loses nothing by
// moving, and sessions that never move leave some replicas with more
// sessions than others once their caches overflow: such a session moves to
// a replica holding clearly less live context (pickRebalance). When no
// replica has room for a session (admission), it goes to the replicas with
// the least live context for their size, the predicted TTFT choosing among
// them (pickLeastOverfull).
//
// Prompt sizes are the request's Content-Length over bytesPerToken.

type costPolicy struct{}

func newCostPolicy(*Model, ModelOptions) policy { return costPolicy{} }

func (p costPolicy) pick(m *Model, h uint64, r Request) int {
	return m.pickBooked(p, h, r)
}

// choose is cost's rule: the lowest predicted TTFT among the replicas
// admission allows; with none, the least overfull; a session that stays
// may still move off a thrashing replica (pickRebalance).
func (costPolicy) choose(m *Model, s *peerSession, prompt float64, now int64) int {
	i := m.pickCost(s, prompt, now)
	if i < 0 { // no replica has room: the least overfull
		return m.pickLeastOverfull(s, prompt, now)
	}
	if s != nil && i == s.replica {
		if j := m.pickRebalance(s, prompt, now); j >= 0 {
			return j
		}
	}
	return i
}

// Defaults of the cost model before anything is learned. They are priors,
// replaced by what the replicas' metrics say within a few polls.
const (
	// priorPrefillRate (tokens/s) is a small card's order of magnitude.
	priorPrefillRate = 4000.0
	// priorCapacity (tokens) is assumed while no replica has reported
	// vllm:cache_config_info or enough KV usage to infer it.
	priorCapacity = 32_000.0
	// rateEWMA and capEWMA weigh each new sample.
	rateEWMA = 0.2
	capEWMA  = 0.1
	// rateWindow is the time constant of the decayed sums behind the
	// prefill rate. It must be longer than a cold prefill (55 s for a 51k
	// prompt on the big profile): vLLM counts prefix hits when it admits a
	// request and prompt tokens when the prefill ends, so a shorter window
	// swings between a fraction and several times the true rate, and the
	// backlog drains at that rate
	// (docs/notes/2026-11-30-overload-and-policy-cost.md, section 2).
	rateWindow = 60 * time.Second
	// hysteresisAbs and hysteresisRel: a known session leaves the replica
	// that holds it only for one predicted at least this much better, so
	// that sessions do not flap between near-equal replicas.
	hysteresisAbs = 0.5 // seconds
	hysteresisRel = 0.2
	// outputAllowance (tokens) is added to a session's context after each
	// turn for the reply it received (the warden sees no response bodies).
	outputAllowance = 256
)

// peerRep is the cost model's view of one replica.
type peerRep struct {
	backlog      float64        // predicted prefill tokens not yet computed
	backlogAt    int64          // when backlog was last drained (unix ns)
	touched      float64        // tokens that took new blocks here, cumulative (LRU clock; lru.go)
	allocCounted bool           // touched follows the replica's counters (else the prompts placed)
	inflightCtx  float64        // prompt tokens of the session requests in flight here
	inflightN    int            // those requests
	inflightNew  float64        // predicted uncached tokens of the session requests in flight here
	unaffinedNew float64        // the same for requests without a session (no Done hook finds them): drained like the backlog
	live         float64        // context of the live sessions held here, and of the rooms granted to parked requests (admission)
	liveN        int            // how many sessions and rooms live counts
	holders      []*peerSession // the sessions live here

	capLearned  float64 // KV capacity inferred from usage (0: unknown)
	turnSeconds float64 // mean time a request stays in flight, learned
	ttft        float64 // mean time to first token the replica reports, learned (s)

	prev       ReplicaMetrics // previous poll, for counter deltas
	prevAt     time.Time
	havePrev   bool
	prevQueued bool
}

// capacity is r's KV capacity in tokens: vllm:cache_config_info when the
// replica exports it, else learned from usage, else the prior.
func (m *Model) capacity(i int) float64 {
	if c := m.reps[i].metrics.KVCapacityTokens; c > 0 {
		return c
	}
	if c := m.peer.reps[i].capLearned; c > 0 {
		return c
	}
	return priorCapacity
}

// prefillRate is the learned prefill rate (pooled over replicas).
func (m *Model) prefillRate(int) float64 {
	if r := m.peer.rate; r > 0 {
		return r
	}
	return priorPrefillRate
}

// drain brings r's backlog to now. The backlog never exceeds what the
// requests still in flight were predicted to prefill: a drain rate learned
// too low must not pile up work that has already finished.
func (pr *peerRep) drain(now int64, rate float64) {
	if pr.backlogAt != 0 && now > pr.backlogAt {
		done := rate * float64(now-pr.backlogAt) / 1e9
		pr.backlog = math.Max(0, pr.backlog-done)
		pr.unaffinedNew = math.Max(0, pr.unaffinedNew-done)
	}
	pr.backlog = math.Min(pr.backlog, pr.inflightNew+pr.unaffinedNew)
	pr.backlogAt = now
}

// held estimates the tokens of session s still cached on its replica
// (lru.go).
func (m *Model) held(s *peerSession) float64 {
	if s.replica < 0 || s.replica >= len(m.reps) {
		return 0
	}
	if s.inflight > 0 {
		return s.ctx // its blocks are referenced by a running request
	}
	return m.lruHeld(s)
}

// heldAtRun is held(s) by the time s's next request runs on its replica:
// the prefill queued ahead of it there allocates blocks first, and LRU
// takes them from s's (unreferenced while it waits) once the rest of the
// cache is in use.
func (m *Model) heldAtRun(s *peerSession, now int64) float64 {
	h := m.held(s)
	if s.replica < 0 || s.replica >= len(m.reps) || s.inflight > 0 {
		return h
	}
	pr := &m.peer.reps[s.replica]
	pr.drain(now, m.prefillRate(s.replica))
	return math.Max(0, math.Min(h, m.capacity(s.replica)-pr.backlog-(pr.inflightCtx-pr.inflightNew)))
}

// uncached is the prompt's tokens that replica i would have to prefill.
func (m *Model) uncached(s *peerSession, i int, prompt float64) float64 {
	if s != nil && s.replica == i {
		return math.Max(0, prompt-m.held(s))
	}
	return math.Max(0, prompt-m.peer.sharedPrefix)
}

// predictTTFT is ttft(r) above, without hysteresis; call with m.mu held.
func (m *Model) predictTTFT(i int, s *peerSession, prompt float64, now int64) float64 {
	pr := &m.peer.reps[i]
	rate := m.prefillRate(i)
	pr.drain(now, rate)
	queued := pr.backlog
	if w := m.reps[i].metrics.Waiting; w > 0 {
		queued = math.Max(queued, w*m.peer.meanUncached)
	}
	t := (queued + m.uncached(s, i, prompt)) / rate
	if over := pr.inflightCtx + prompt - m.capacity(i); over > 0 && pr.turnSeconds > 0 {
		t += over / m.capacity(i) * pr.turnSeconds
	}
	return t
}

// tieSlack: predictions closer than this (seconds, or this share of the
// best) are equal, and the replica with fewer requests in flight (then less live context) wins: TTFT does
// not see decode work, which an even split keeps fast.
const (
	tieSlackAbs = 0.05
	tieSlackRel = 0.05
)

// pickCost chooses by predicted TTFT among the replicas admission allows.
func (m *Model) pickCost(s *peerSession, prompt float64, now int64) int {
	n := len(m.reps)
	ts := m.peerScratch()
	bestT := math.Inf(1)
	var stay float64
	for i := range n {
		ts[i] = math.Inf(1)
		if !m.reps[i].healthy || !m.admits(s, i, prompt) {
			continue
		}
		ts[i] = m.predictTTFT(i, s, prompt, now)
		if s != nil && i == s.replica {
			stay = ts[i]
		}
		bestT = math.Min(bestT, ts[i])
	}
	slack := math.Max(tieSlackAbs, tieSlackRel*bestT)
	best := least.By(&m.start, n, func(i int) (float64, bool) {
		// the warden's exact in-flight count, then the live context
		return float64(m.reps[i].inFlight) + m.physical(i)/m.capacity(i),
			!math.IsInf(ts[i], 1) && ts[i] <= bestT+slack
	})
	if best >= 0 {
		bestT = ts[best]
	}
	if s != nil && s.replica >= 0 && best != s.replica && m.reps[s.replica].healthy && m.admits(s, s.replica, prompt) {
		if bestT > stay-math.Max(hysteresisAbs, hysteresisRel*stay) {
			return s.replica
		}
	}
	return best
}

// costObserve learns r's prefill rate and KV capacity from one poll;
// call with m.mu held, after r.metrics is updated.
func (m *Model) costObserve(i int, s ReplicaMetrics, now time.Time) {
	pr := &m.peer.reps[i]
	if pr.havePrev && now.After(pr.prevAt) {
		dt := now.Sub(pr.prevAt).Seconds()
		uncached := (s.PromptTokens - pr.prev.PromptTokens) - (s.PrefixHits - pr.prev.PrefixHits)
		count := s.TTFTCount - pr.prev.TTFTCount
		ttftSum := s.TTFTSum - pr.prev.TTFTSum
		if count > 0 && ttftSum >= 0 {
			t := ttftSum / count
			if pr.ttft == 0 {
				pr.ttft = t
			} else {
				pr.ttft += rateEWMA * (t - pr.ttft)
			}
		}
		// rate = decayed sum of uncached tokens over the decayed sum of the
		// seconds they took, pooled over the model's replicas (one model,
		// one kind of card): a ratio of sums, because one poll window's
		// counters rarely cover the same requests (vLLM counts prefix hits
		// when it admits a request, prompt tokens when its prefill ends).
		reset := s.PromptTokens < pr.prev.PromptTokens || s.PrefixHits < pr.prev.PrefixHits
		if !reset {
			m.lruAdvance(pr, s)
			ps := m.peer
			secs := ttftSum // not saturated: a TTFT is mostly its own prefill
			if pr.prevQueued && s.Waiting > 0 {
				secs = dt // saturated the whole window: it computed at its rate
			}
			d := 1.0
			if t := now.UnixNano(); ps.rateAt != 0 && t > ps.rateAt {
				d = math.Exp(-float64(t-ps.rateAt) / float64(rateWindow))
			}
			ps.rateAt = max(ps.rateAt, now.UnixNano())
			ps.rateTokens = ps.rateTokens*d + uncached
			ps.rateSeconds = ps.rateSeconds*d + secs
			ps.rateCount = ps.rateCount*d + count
			if ps.rateTokens > 0 && ps.rateSeconds > 0 {
				ps.rate = ps.rateTokens / ps.rateSeconds
			}
			if ps.rateTokens > 0 && ps.rateCount > 0 {
				ps.meanUncached = ps.rateTokens / ps.rateCount
			}
		}
	}
	// vLLM's usage counts the blocks referenced by running requests, which
	// hold the context the warden knows it sent (prompts in flight) when
	// none of them waits.
	if s.KVUsage >= 0.3 && pr.inflightCtx > 0 && s.Waiting == 0 {
		est := pr.inflightCtx / s.KVUsage
		if pr.capLearned == 0 {
			pr.capLearned = est
		} else {
			pr.capLearned += capEWMA * (est - pr.capLearned)
		}
	}
	pr.prev, pr.prevAt, pr.havePrev, pr.prevQueued = s, now, true, s.Waiting > 0
}

// Rebalancing (pickRebalance): a session moves off its replica only when
// the warden predicts that less than evictedShare of its prompt will still
// be cached there by the time its request runs (heldAtRun: the prefill
// queued ahead of it evicts it while it waits, which held alone, taken at
// the end of its last turn, does not see) AND the replica's own counters
// agree (its prefix hit rate over the admin API's window under
// thrashingHitRatio: the LRU-clock estimate does not know the shared
// system prompt and is pessimistic where sessions are small), and only to
// a replica whose live context plus the session stays at least
// rebalanceMargin sessions under the replica's own.
const (
	evictedShare      = 0.5
	thrashingHitRatio = 0.5
	rebalanceMargin   = 0.5
)

// pickRebalance returns where session s should move to, or -1 to stay;
// call with m.mu held. Not while admission is engaged, which decides where
// sessions live itself.
func (m *Model) pickRebalance(s *peerSession, prompt float64, now int64) int {
	if s == nil || s.replica < 0 || s.replica >= len(m.reps) || !m.reps[s.replica].healthy ||
		m.peer.admission.engaged || m.heldAtRun(s, now) >= evictedShare*prompt {
		return -1
	}
	if hit, ok := m.reps[s.replica].hitRate.value(); !ok || hit >= thrashingHitRatio {
		return -1
	}
	own := m.physical(s.replica)
	need := prompt + outputAllowance
	limit := own/m.capacity(s.replica) - rebalanceMargin*need/m.capacity(s.replica)
	best, bestT := -1, m.predictTTFT(s.replica, s, prompt, now)
	for i := range m.reps {
		if i == s.replica || !m.reps[i].healthy || (m.physical(i)+m.room(i, prompt))/m.capacity(i) > limit {
			continue
		}
		if t := m.predictTTFT(i, s, prompt, now); t <= bestT {
			best, bestT = i, t
		}
	}
	if best >= 0 {
		return best
	}
	// No replica is clearly emptier: then a session that will recompute
	// anyway goes where the wait is clearly shorter, among the replicas
	// that thrash as well (it would evict the cache of one that does not)
	// and would hold, with it, no more than its own replica holds now
	// (give or take half a session: sessions differ in size).
	stay := bestT
	for i := range m.reps {
		if i == s.replica || !m.reps[i].healthy || m.physical(i)+m.room(i, prompt) > own+rebalanceMargin*need {
			continue
		}
		if hit, ok := m.reps[i].hitRate.value(); !ok || hit >= thrashingHitRatio {
			continue
		}
		if t := m.predictTTFT(i, s, prompt, now); t < bestT && t < stay-math.Max(hysteresisAbs, hysteresisRel*stay) {
			best, bestT = i, t
		}
	}
	return best
}

// pickLeastOverfull places a session no replica has room for: among the
// healthy replicas whose live context for their capacity is within half
// this session of the least, the one with the lowest predicted TTFT. The
// TTFT alone would pick the replica whose sessions currently hit their
// cache, and crowd it until they no longer do.
func (m *Model) pickLeastOverfull(s *peerSession, prompt float64, now int64) int {
	need := prompt + outputAllowance
	n := len(m.reps)
	lowest := math.Inf(1)
	for i := range n {
		if m.reps[i].healthy {
			lowest = math.Min(lowest, (m.physical(i)+m.room(i, prompt))/m.capacity(i))
		}
	}
	return least.By(&m.start, n, func(i int) (float64, bool) {
		if !m.reps[i].healthy || (m.physical(i)+m.room(i, prompt))/m.capacity(i) > lowest+0.5*need/m.capacity(i) {
			return 0, false
		}
		return m.predictTTFT(i, s, prompt, now), true
	})
}
