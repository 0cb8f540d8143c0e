package placement

import "time"

// RestoreSession puts back a session that a previous warden pinned, as read
// from the kernel's pinned sessions map at start, so that restarting the
// warden does not cost live conversations their prefix cache. It is a no-op
// (false) for a session already known, a replica this model does not have,
// or a session idle for longer than the TTL. The restored entry keeps its
// last-seen time, so it expires when it would have.
func (m *Model) RestoreSession(h uint64, replica int, lastSeen, now time.Time) bool {
	return m.RestoreConversation(h, replica, 0, uint8(ConvSession), lastSeen, now)
}

// RestoreConversation is RestoreSession for any conversation: parent and
// kind are what the map recorded of it (kind 0, from a map written before
// conversations had kinds, is a session).
func (m *Model) RestoreConversation(h uint64, replica int, parent uint64, kind uint8, lastSeen, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h == 0 || replica < 0 || replica >= len(m.reps) {
		return false
	}
	seen := lastSeen.UnixNano()
	if now.UnixNano()-seen > m.sessions.ttl || m.sessions.find(h) >= 0 {
		return false
	}
	c := conversation{key: h, parent: parent, kind: ConversationKind(kind)}
	if c.kind == ConvNone || c.kind >= NumConversationKinds {
		c.kind = ConvSession
	}
	m.sessions.insert(c, replica, seen)
	return true
}
