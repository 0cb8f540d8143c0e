package agent

import (
	"fmt"
	"time"
)

// Cache-capacity admission (docs/placement.md): per replica, the context of
// its live sessions stays at or under its KV capacity, so that LRU never has
// to evict a live session's history to make room for another's (the
// thrashing of a working set larger than memory, Denning 1968). A session
// that fits nowhere either waits at the warden (queue) or goes where it
// costs least (spill). Used by policy cost.

// AdmissionMode says what happens to a session no replica has room for.
type AdmissionMode string

const (
	// AdmissionOff: no capacity check (cost placement only).
	AdmissionOff AdmissionMode = "off"
	// AdmissionSpill: prefer replicas with room; with none, place where the
	// predicted TTFT is lowest anyway.
	AdmissionSpill AdmissionMode = "spill"
	// AdmissionQueue: a new (or returning, no longer live) session with no
	// room anywhere waits at the warden, first come first served, until a
	// live session ends or the timeout passes (then it goes where it costs
	// least); a full queue refuses it (ErrAdmissionFull: 503).
	AdmissionQueue AdmissionMode = "queue"
)

// AdmissionConfig tunes admission.
type AdmissionConfig struct {
	Mode AdmissionMode `yaml:"mode"`
	// QueueMax bounds the requests waiting at the warden (queue mode).
	QueueMax int `yaml:"queue_max"`
	// Timeout is the longest a request waits at the warden; after it, it is
	// placed where it costs least.
	Timeout time.Duration `yaml:"timeout"`
	// Fill is the share of a replica's KV capacity live sessions may hold
	// (1: all of it).
	Fill float64 `yaml:"fill"`
}

// DefaultAdmission is what policy cost runs with unless told otherwise.
var DefaultAdmission = AdmissionConfig{Mode: AdmissionSpill, QueueMax: 256, Timeout: 30 * time.Second, Fill: 1}

// ParseAdmissionMode reads off, spill or queue.
func ParseAdmissionMode(s string) (AdmissionMode, error) {
	switch m := AdmissionMode(s); m {
	case AdmissionOff, AdmissionSpill, AdmissionQueue:
		return m, nil
	}
	return "", fmt.Errorf("admission %q: want off, spill or queue", s)
}

// SetAdmission changes admission (zero fields keep their defaults).
func (m *Model) SetAdmission(c AdmissionConfig) error {
	if _, err := ParseAdmissionMode(string(c.Mode)); err != nil {
		return err
	}
	if c.QueueMax <= 0 {
		c.QueueMax = DefaultAdmission.QueueMax
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultAdmission.Timeout
	}
	if c.Fill <= 0 {
		c.Fill = DefaultAdmission.Fill
	}
	m.mu.Lock()
	m.peer.admission = c
	m.mu.Unlock()
	return nil
}

// Admission returns the admission settings.
func (m *Model) Admission() AdmissionConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peer.admission
}

// admits says whether replica i has room for session s's prompt; call with
// m.mu held.
func (m *Model) admits(s *peerSession, i int, prompt float64) bool {
	if m.peer.admission.Mode == AdmissionOff {
		return true
	}
	if s != nil && s.replica == i && (s.live > 0 || s.inflight > 0) {
		return true // already counted there
	}
	need := prompt + outputAllowance
	return m.peer.reps[i].live+need <= m.peer.admission.Fill*m.capacity(i)
}

// Wait is a request parked at the warden by admission. The caller waits
// for Ready (or its own timeout, Admission().Timeout, or the client going
// away), then calls Claim (or Cancel).
type Wait struct {
	// Ready is closed when a replica has room for the request.
	Ready <-chan struct{}
	// Since is when the request was parked.
	Since time.Time

	ready    chan struct{}
	req      Request
	prompt   float64
	hash     uint64
	replica  int     // reserved replica once granted
	reserved float64 // tokens reserved there
	granted  bool
	claimed  bool
}

// Admit is Place under admission: it places the request at once, or, when
// policy cost runs with AdmissionQueue and no replica has room for a
// session that is not live, parks it and returns a Wait (Placement zero).
// It returns ErrAdmissionFull when the queue is full (answer 503 with
// Retry-After). With any other policy or mode it is Place.
func (m *Model) Admit(r Request) (Placement, *Wait, error) {
	m.mu.Lock()
	if w, err := m.maybePark(r); w != nil || err != nil {
		m.mu.Unlock()
		return Placement{Replica: -1, RankHeader: -1}, w, err
	}
	m.mu.Unlock()
	p, err := m.Place(r)
	return p, nil, err
}

// maybePark parks r if admission says so; call with m.mu held.
func (m *Model) maybePark(r Request) (*Wait, error) {
	if m.policy != PolicyCost || !m.affinity || m.peer.admission.Mode != AdmissionQueue ||
		r.PinnedHeader != "" || r.SessionID == "" {
		return nil, nil
	}
	h := m.hasher.Hash(r.SessionID)
	s := m.peer.sessions[h]
	if s != nil && (s.live > 0 || s.inflight > 0) {
		return nil, nil // a live session is never parked
	}
	prompt := m.promptTokens(r)
	if len(m.peer.parked) == 0 {
		for i := range m.reps {
			if m.reps[i].healthy && m.admits(s, i, prompt) {
				return nil, nil
			}
		}
	}
	if len(m.peer.parked) >= m.peer.admission.QueueMax {
		m.peer.rejected++
		return nil, ErrAdmissionFull
	}
	ch := make(chan struct{})
	w := &Wait{Ready: ch, Since: r.Now, ready: ch, req: r, prompt: prompt, hash: h, replica: -1}
	m.peer.parked = append(m.peer.parked, w)
	m.peer.waits++
	return w, nil
}

// admitParked grants room to parked requests, first come first served,
// while some replica has it; call with m.mu held.
func (m *Model) admitParked(now int64) {
	for len(m.peer.parked) > 0 {
		w := m.peer.parked[0]
		s := m.peer.sessions[w.hash]
		i := m.pickCost(s, w.prompt, now)
		if i < 0 {
			return
		}
		w.replica, w.reserved, w.granted = i, w.prompt+outputAllowance, true
		m.peer.reps[i].live += w.reserved
		close(w.ready)
		m.peer.parked = m.peer.parked[1:]
	}
}

// Claim places a parked request: on the replica that has room once Ready
// is closed, or, called before that (the timeout passed), where it costs
// least. Call it once per Wait, with the time it is called.
func (m *Model) Claim(w *Wait, now time.Time) (Placement, error) {
	m.mu.Lock()
	if w.claimed {
		m.mu.Unlock()
		return Placement{Replica: -1, RankHeader: -1}, ErrWaitClaimed
	}
	w.claimed = true
	m.release(w)
	if !w.granted {
		m.peer.timedOut++
	}
	m.mu.Unlock()
	r := w.req
	r.Now = now
	return m.Place(r)
}

// Cancel drops a parked request (its client went away).
func (m *Model) Cancel(w *Wait) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !w.claimed {
		w.claimed = true
		m.release(w)
	}
}

// release returns w's reservation or takes it out of the queue; call with
// m.mu held.
func (m *Model) release(w *Wait) {
	if w.granted {
		m.peer.reps[w.replica].live -= w.reserved
		w.reserved = 0
		return
	}
	for k, x := range m.peer.parked {
		if x == w {
			m.peer.parked = append(m.peer.parked[:k], m.peer.parked[k+1:]...)
			return
		}
	}
}

// AdmissionStats are admission's counters.
type AdmissionStats struct {
	Parked   int    // waiting now
	Waits    uint64 // ever parked
	Rejected uint64 // refused, queue full
	TimedOut uint64 // placed after the timeout without room
}

// AdmissionStats reads admission's counters.
func (m *Model) AdmissionStats() AdmissionStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return AdmissionStats{Parked: len(m.peer.parked), Waits: m.peer.waits, Rejected: m.peer.rejected, TimedOut: m.peer.timedOut}
}
