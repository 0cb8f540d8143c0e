package placement

// Policy `sticky` is the default rule: a new session goes to the least-loaded
// replica (load(r), placement.go) and is pinned there; its later turns go
// to the pinned replica unless that one has reached the spill threshold
// (then the least-loaded other replica, counted spilled, the pin stays) or
// is unhealthy (placed again and repinned); a request without a session id
// goes to the least-loaded replica and pins nothing.

type stickyPolicy struct{}

func newStickyPolicy(*Model, ModelOptions) policy { return stickyPolicy{} }

// pick is the choice without a session: the least-loaded replica.
func (stickyPolicy) pick(m *Model, _ uint64, _ Request) int { return m.leastLoaded(-1) }

func (stickyPolicy) place(m *Model, h uint64, pos int, now int64) Placement {
	switch {
	case h == 0:
		return m.commit(m.leastLoaded(-1), KindUnaffined, 0, -1, now)
	case pos < 0:
		i := m.leastLoaded(-1)
		pos = m.sessions.insert(h, i, now)
		return m.commit(i, KindNew, h, pos, now)
	}
	pinned := int(m.sessions.slots[pos].replica)
	if !m.reps[pinned].healthy {
		i := m.leastLoaded(-1)
		m.moved++
		m.sessions.repin(pos, i)
		return m.commit(i, KindRepinned, h, pos, now)
	}
	if m.reps[pinned].inFlight >= m.spillThreshold(pinned) {
		if i := m.leastLoaded(pinned); i >= 0 {
			m.moved++
			return m.commit(i, KindSpilled, h, pos, now)
		}
	}
	m.stayed++
	return m.commit(pinned, KindSticky, h, pos, now)
}
