package placement

import "time"

// Two hooks for a placement whose bytes are moved by someone else: the
// endpoint picker (package picker) places sessions on hosts with a Model
// whose replicas are the hosts, and the gateway in front, not the picker,
// connects to them.

// Served tells the model that the request placed as p was served by
// replica i instead of p.Replica: the gateway tried p's replica, could not
// reach it, and went on down the fallback list it was given. The request's
// in-flight count moves to i, and the session's pin moves with it when it
// pointed at p's replica (its history is now cached on i). It returns the
// placement to hand to Done; p itself must not be used again. An i out of
// range, or equal to p.Replica, changes nothing.
func (m *Model) Served(p Placement, i int) Placement {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < 0 || i >= len(m.reps) || i == p.Replica || p.Replica < 0 {
		return p
	}
	if r := &m.reps[p.Replica]; r.inFlight > 0 {
		r.inFlight--
		r.retriedAway++
	}
	m.reps[i].inFlight++
	if p.SessionHash != 0 {
		if pos := m.sessions.find(p.SessionHash); pos >= 0 && int(m.sessions.slots[pos].replica) == p.Replica {
			m.sessions.repin(pos, i)
		}
	}
	p.Replica, p.Addr = i, m.reps[i].addr
	if m.oneEndpoint {
		p.RankHeader = i
	}
	return p
}

// KnownSession reports whether id names a live session (one the table
// holds and that has not been idle for the TTL); it places nothing. The
// picker sheds only requests of conversations that have not started.
func (m *Model) KnownSession(id string, now time.Time) bool {
	if id == "" {
		return false
	}
	h := m.hasher.Hash(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions.lookup(h, now.UnixNano()) >= 0
}
