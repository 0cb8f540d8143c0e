package placement

// Policy `sticky` is the default rule: a new session goes to the least-loaded
// replica (load(r), placement.go) and is pinned there; its later turns go
// to the pinned replica unless that one has reached the spill threshold
// (then the least-loaded other replica, counted spilled, the pin stays) or
// is unhealthy (placed again and repinned); a request without a session id
// goes to the least-loaded replica and pins nothing. A known conversation
// whose prompt starts over goes by load (conversation.go, "Contexts that
// start over"). It books every placement in the cost model (costmodel.go),
// as the cost-aware policies do, so that what the cost model knows (the
// prefill queued on each replica, where each conversation's cache is) is
// there for whoever reads it: cache-capacity admission measures the live
// context by it, and while admission is engaged a conversation that is not
// live starts or resumes where its room is (policy_sticky_admission.go).
// With `spill_threshold: prefill` (the default) it also moves a turn off
// its replica when the prefill queued ahead of it there costs clearly more
// than re-prefilling the conversation elsewhere (policy_sticky_prefill.go);
// `auto` is the count alone.

type stickyPolicy struct{}

func newStickyPolicy(*Model, ModelOptions) policy { return stickyPolicy{} }

// pick is the choice without a session: the least-loaded replica.
func (stickyPolicy) pick(m *Model, _ uint64, _ Request) int { return m.leastLoaded(-1) }

func (p stickyPolicy) place(m *Model, c conversation, pos int, r Request) Placement {
	pl := p.decide(m, c, pos, r)
	m.stickyBook(pl, r)
	return pl
}

func (stickyPolicy) decide(m *Model, c conversation, pos int, r Request) Placement {
	now := r.Now.UnixNano()
	h := c.key
	switch {
	case h == 0:
		return m.commit(m.leastLoaded(-1), KindUnaffined, 0, -1, now)
	case pos < 0:
		i := m.stickyRoom(h, pos, r)
		if i < 0 {
			i = m.leastLoaded(-1)
		}
		pos = m.sessions.insert(c, i, now)
		return m.commit(i, KindNew, h, pos, now)
	case c.change == 0 || r.roomOn > 0:
		if i := m.stickyRoom(h, pos, r); i >= 0 { // admission (policy_sticky_admission.go)
			m.countStay(pos, i)
			m.sessions.repin(pos, i)
			return m.commit(i, KindRepinned, h, pos, now)
		}
	}
	switch c.change {
	case sideContext: // nothing of it is cached here: by load, the pin kept
		return m.commit(m.leastLoaded(-1), KindFresh, h, pos, now)
	case freshContext: // the conversation moves with its new context
		i := m.freshReplica(c.side)
		m.sessions.repin(pos, i)
		return m.commit(i, KindFresh, h, pos, now)
	}
	pinned := int(m.sessions.slots[pos].replica)
	if !m.reps[pinned].healthy {
		i := m.leastLoaded(-1)
		m.moved++
		m.sessions.repin(pos, i)
		return m.commit(i, KindRepinned, h, pos, now)
	}
	if m.reps[pinned].inFlight >= m.spillThreshold(pinned) {
		if i := m.leastLoaded(pinned); i >= 0 && !m.countSpillCostsMore(h, pinned, i, r) {
			m.moved++
			return m.commit(i, KindSpilled, h, pos, now)
		}
	}
	if m.cfg.SpillThreshold.Prefill {
		if i := m.prefillSpill(h, pinned, r); i >= 0 {
			m.moved++
			m.sessions.repin(pos, i)
			return m.commit(i, KindSpilled, h, pos, now)
		}
	}
	m.stayed++
	return m.commit(pinned, KindSticky, h, pos, now)
}
