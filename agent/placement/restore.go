package placement

import "time"

// RestoreSession puts back a session that a previous warden pinned, as read
// from the kernel's pinned sessions map at start, so that restarting the
// warden does not cost live conversations their prefix cache. It is a no-op
// (false) for a session already known, a replica this model does not have,
// or a session idle for longer than the TTL. The restored entry keeps its
// last-seen time, so it expires when it would have.
func (m *Model) RestoreSession(h uint64, replica int, lastSeen, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h == 0 || replica < 0 || replica >= len(m.reps) {
		return false
	}
	seen := lastSeen.UnixNano()
	if now.UnixNano()-seen > m.sessions.ttl || m.sessions.find(h) >= 0 {
		return false
	}
	m.sessions.insert(h, replica, seen)
	return true
}
