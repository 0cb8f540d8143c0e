package placement

import "fmt"

// A replica takes new placements when the poller finds it up and the
// operator has not asked it to drain. The two are kept apart because
// they end differently: a replica that is down has its stalled requests
// ended (l7 asks Healthy), one that drains lets them finish, and its
// conversations move at their next turn, as they would off a replica
// that is down, because every policy skips a replica that is not healthy.

// ReasonDraining is the reason a draining replica shows.
const ReasonDraining = "draining: takes no new conversations; live ones move at their next turn"

// Healthy reports the poller's verdict on replica i: false after
// unhealthy_after failed polls. A draining replica is healthy (its
// requests in flight are left to finish) but takes no placements.
func (m *Model) Healthy(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return i >= 0 && i < len(m.reps) && m.reps[i].up
}

// SetHealthy marks a replica up or down (the poller's verdict). A replica
// that is down gets no new placements; its sessions are placed again on
// their next request.
func (m *Model) SetHealthy(i int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i >= 0 && i < len(m.reps) {
		r := &m.reps[i]
		if r.up && !ok {
			m.forgetLive(i)
		}
		r.up = ok
		r.healthy = ok && !r.draining
		if ok {
			r.reason = ""
		}
	}
}

// PollFailed counts a failed poll of replica i and keeps why it failed
// (GET /health refused, an HTTP status, no vLLM series in /metrics), which
// the admin API, /readyz and the dashboard show while the replica is down.
func (m *Model) PollFailed(i int, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i >= 0 && i < len(m.reps) {
		m.reps[i].pollFailures++
		if reason != "" {
			m.reps[i].reason = reason
		}
	}
}

// SetDraining starts or ends a drain of replica i: no new conversation
// is placed there and a live one moves at its next turn; requests in
// flight finish where they are. It returns ErrNoReplica for an index the
// model does not have.
func (m *Model) SetDraining(i int, on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < 0 || i >= len(m.reps) {
		return fmt.Errorf("%w: %d (the model has %d)", ErrNoReplica, i, len(m.reps))
	}
	r := &m.reps[i]
	r.draining = on
	r.healthy = r.up && !on
	return nil
}

// Draining reports whether replica i drains.
func (m *Model) Draining(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return i >= 0 && i < len(m.reps) && m.reps[i].draining
}

// unhealthyReason says why replica i takes no placements ("" when it
// does): the drain, or the last failed poll. Call with m.mu held.
func (m *Model) unhealthyReason(i int) string {
	r := &m.reps[i]
	switch {
	case r.draining && !r.up && r.reason != "":
		return ReasonDraining + "; and down: " + r.reason
	case r.draining:
		return ReasonDraining
	case !r.up && r.reason != "":
		return r.reason
	case !r.up:
		return "marked unhealthy"
	}
	return ""
}

// forgetLive ends the liveness of the conversations the cost model counts
// on replica i, but for those with a turn in flight there (they end with
// it): a replica that is down has lost them or will be restarted without
// them, and rooms counted for them would keep admission engaged and steer
// new conversations off replicas that are empty; call with m.mu held.
func (m *Model) forgetLive(i int) {
	m.endLiveWhere(i, 0, func(s *peerSession) bool { return s.inflight == 0 })
}
