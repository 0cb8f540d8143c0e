package placement

import (
	"cmp"
	"math"
	"slices"
)

// The queue at the warden and the swaps of admission (admission.go): who
// gets room that frees, when a session gives its room up, and what happens
// to a request whose wait reaches the timeout. Everything here runs under
// m.mu, at the moments room can free: a request's end (Done), a poll (the
// sweep ends quiet sessions' liveness), a waiter leaving, a wait's timeout.

// agingShare: a waiter that has waited this share of the timeout has aged:
// nobody passes it any more, so the room that frees accumulates for it
// (without aging a large session at the head would block small ones that
// fit, and with passing alone it could wait for the timeout every time).
var agingShare = 0.25

// aged says whether w has waited long enough that nobody may pass it.
func (m *Model) aged(w *Wait, now int64) bool {
	return float64(now-w.order) >= agingShare*float64(m.peer.admission.cfg.Timeout)
}

// enqueue puts w in the queue by its order: first come first served, a
// session's earlier waits counting as if it had come that much sooner
// (so that waits spread evenly over sessions, not by the luck of who
// lost their room twice).
func (m *Model) enqueue(w *Wait) {
	a := &m.peer.admission
	k, _ := slices.BinarySearchFunc(a.parked, w.order, func(x *Wait, o int64) int {
		if x.order <= o {
			return -1 // equal orders keep arrival order
		}
		return 1
	})
	a.parked = slices.Insert(a.parked, k, w)
}

// admitsNow says whether a request of session s (nil: new), not live,
// arriving now may be placed without waiting: some healthy replica has
// room for it and no aged waiter is before it.
func (m *Model) admitsNow(s *peerSession, prompt float64, now int64) bool {
	a := &m.peer.admission
	if len(a.parked) > 0 {
		m.admitParked(now)
		for _, w := range a.parked {
			if m.aged(w, now) {
				return false
			}
		}
	}
	for i := range m.reps {
		if m.reps[i].healthy && m.admits(s, i, prompt) {
			return true
		}
	}
	return false
}

// admitParked grants room to parked requests in arrival order: each one
// that fits somewhere gets room reserved on the replica cost picks among
// those that fit; one that fits nowhere lets those behind it try only
// while it is young (aged).
func (m *Model) admitParked(now int64) {
	a := &m.peer.admission
	for k := 0; k < len(a.parked); {
		w := a.parked[k]
		i := m.pickCost(m.peer.sessions[w.hash], w.prompt, now)
		if i < 0 {
			i = m.makeRoom(w, now)
		}
		if i < 0 {
			if m.aged(w, now) {
				return
			}
			k++
			continue
		}
		m.grant(w, i)
		a.parked = slices.Delete(a.parked, k, k+1)
	}
}

// grant reserves room for w on replica i until w is claimed.
func (m *Model) grant(w *Wait, i int) {
	pr := &m.peer.reps[i]
	w.replica, w.reserved, w.granted = i, w.prompt+outputAllowance, true
	pr.live += w.reserved
	pr.liveN++
	close(w.ready)
}

// quantum is how long session s may hold its room while others wait
// (seconds): Quantum times its re-prefill (what it will have to compute
// again when it comes back: its context less the shared prefix, at the
// learned prefill rate).
func (m *Model) quantum(s *peerSession) float64 {
	return m.peer.admission.cfg.Quantum * math.Max(0, s.ctx-m.peer.sharedPrefix) / m.prefillRate(s.replica)
}

// maybeYield ends session s's hold on its room at the end of a turn (none
// of its requests in flight) when admission is engaged, it has held the
// room for its quantum and a waiter would fit in it; its next request then
// waits its turn. Call with m.mu held.
func (m *Model) maybeYield(s *peerSession, now int64) {
	a := &m.peer.admission
	if !a.engaged || len(a.parked) == 0 || s.live == 0 || s.inflight > 0 {
		return
	}
	if float64(now-s.heldSince)/1e9 < m.quantum(s) || !m.yieldHelps(s, now) {
		return
	}
	m.setLive(s, 0, now)
	a.yields++
}

// yieldHelps says whether the room s holds would let a waiter in: the
// first waiter in order that may go (any young one, or the first aged
// one, which nobody passes) fits on s's replica once s is gone.
func (m *Model) yieldHelps(s *peerSession, now int64) bool {
	i := s.replica
	if !m.reps[i].healthy {
		return false
	}
	pr := &m.peer.reps[i]
	shared := m.peer.sharedPrefix
	own := s.live
	if pr.liveN > 1 {
		own -= shared
	}
	free := m.peer.admission.cfg.Fill*m.capacity(i) - m.physical(i) + own
	for _, w := range m.peer.admission.parked {
		need := w.prompt + outputAllowance
		if pr.liveN > 1 {
			need -= shared
		}
		if need <= free {
			return true
		}
		if m.aged(w, now) {
			return false
		}
	}
	return false
}

// likelyEndedShare: under pressure (someone waits), a session idle for so
// long that it has more likely ended than not (gapQuantiles.likelyEnded)
// gives its room up without waiting for liveIdle.
var likelyEndedShare = 0.5

// growthSlack: a replica whose live sessions grew past its capacity by
// less than this share of it is left alone: LRU then evicts only that
// much of the session idle longest, cheaper than taking a whole
// session's room.
var growthSlack = 0.2

// makeRoom finds room for w in the rooms of sessions idle for so long
// that they have likely ended, and returns the replica (-1: none): the one
// where that frees enough with the fewest such rooms taken. Call with
// m.mu held.
//
// A request at its timeout takes nobody's room (Claim): a live session
// whose room went to it would come back, wait out a timeout of its own
// and take another's, so that one eviction starts a chain of them
// (measured, docs/notes/2026-12-06-placement-history.md, "At the timeout").
func (m *Model) makeRoom(w *Wait, now int64) int {
	a := &m.peer.admission
	if _, known := m.peer.gaps.likelyEnded(likelyEndedShare); !known {
		return -1
	}
	best, bestCost := -1, math.Inf(1)
	var bestV []*peerSession
	for i := range m.reps {
		if !m.reps[i].healthy {
			continue
		}
		over := m.physical(i) + m.room(i, w.prompt) - a.cfg.Fill*m.capacity(i)
		v, cost, ok := m.victims(i, over, nil, now, false)
		if !ok {
			continue
		}
		// equal costs: the replica whose first victim comes first in
		// victims' order (idle before running, then idle longest)
		if cost < bestCost || (cost == bestCost && len(v) > 0 && len(bestV) > 0 && m.victimBefore(v[0], bestV[0])) {
			best, bestCost, bestV = i, cost, v
		}
	}
	m.evict(bestV, now)
	return best
}

// keepWithin repairs replica i after a live session's context grew past
// what fits (a live session is never parked, and its history grows with
// every turn): the rooms of other sessions there go, in victims' order,
// until the live context fits again. Call with m.mu held, admission
// engaged.
func (m *Model) keepWithin(i int, grew *peerSession, now int64) {
	if over := m.physical(i) - m.peer.admission.cfg.Fill*m.capacity(i); over > growthSlack*m.capacity(i) {
		v, _, _ := m.victims(i, over, grew, now, true)
		m.evict(v, now)
	}
}

// victims chooses whose rooms on replica i to take to free over tokens,
// never skip's: first the sessions idle so long that they have likely
// ended (idle longest first: their blocks are also those LRU evicts
// first), then (unless only those may go) the other idle ones, then those
// whose turn is running (they give their room up when the turn ends: vLLM
// cannot evict a running request's blocks, so the prefill that needs them
// waits for them there); within each group, the session that has waited
// least at the warden so far first (waits spread evenly over sessions),
// then the one idle longest (idle ones) or that has held its room longest
// (running ones). It returns them, the context they give up (a likely ended
// session's counts nothing), and whether that frees enough.
func (m *Model) victims(i int, over float64, skip *peerSession, now int64, any bool) ([]*peerSession, float64, bool) {
	if over <= 0 {
		return nil, 0, true
	}
	ended, known := m.peer.gaps.likelyEnded(likelyEndedShare)
	rank := func(s *peerSession) int {
		switch idle := float64(now-max(s.lastEnd, s.lastPlace)) / 1e9; {
		case s.inflight == 0 && known && idle >= ended:
			return 0
		case s.inflight == 0:
			return 1
		}
		return 2
	}
	var cands []*peerSession
	for _, s := range m.peer.reps[i].holders {
		if s != skip && !s.leaving && (any || rank(s) == 0) {
			cands = append(cands, s)
		}
	}
	slices.SortFunc(cands, func(x, y *peerSession) int {
		if c := cmp.Compare(rank(x), rank(y)); c != 0 {
			return c
		}
		if rank(x) == 0 {
			return cmp.Compare(max(x.lastEnd, x.lastPlace), max(y.lastEnd, y.lastPlace))
		}
		if c := cmp.Compare(x.waited, y.waited); c != 0 {
			return c
		}
		if rank(x) == 1 {
			return cmp.Compare(max(x.lastEnd, x.lastPlace), max(y.lastEnd, y.lastPlace))
		}
		return cmp.Compare(x.heldSince, y.heldSince)
	})
	liveN := m.peer.reps[i].liveN
	cost := 0.0
	for n, s := range cands {
		if over <= 0 {
			return cands[:n], cost, true
		}
		freed := s.live
		if liveN-n > 1 {
			freed -= m.peer.sharedPrefix
		}
		over -= freed
		if rank(s) > 0 {
			cost += s.live
		}
		if rank(s) == 0 {
			s.likelyEnded = true
		}
	}
	return cands, cost, over <= 0
}

// victimBefore says whether x gives its room up before y: idle before
// running, then idle longest.
func (m *Model) victimBefore(x, y *peerSession) bool {
	if (x.inflight == 0) != (y.inflight == 0) {
		return x.inflight == 0
	}
	return max(x.lastEnd, x.lastPlace) < max(y.lastEnd, y.lastPlace)
}

// evict ends the given sessions' hold on their rooms: at once when idle,
// at the end of the turn in flight otherwise.
func (m *Model) evict(v []*peerSession, now int64) {
	a := &m.peer.admission
	for _, s := range v {
		switch {
		case s.likelyEnded:
			a.released++
		default:
			a.evicted++
		}
		s.likelyEnded = false
		if s.inflight > 0 {
			s.leaving = true
		} else {
			m.setLive(s, 0, now)
		}
	}
}

// admissionTick is a poll's part: engage or release admission, then grant
// what fits. Call with m.mu held.
func (m *Model) admissionTick(now int64) {
	m.updateEngaged(now)
	m.admitParked(now)
}
