package placement

import (
	"math"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// Cache-capacity admission (docs/placement.md): per replica, the context of
// the sessions live there stays within its KV cache, so that LRU never
// evicts a live session's history to make room for another's (a working
// set larger than memory thrashes, Denning 1968). It is load control: the
// warden keeps the set of admitted sessions whose working sets fit, the
// others wait at the warden in a fair order, and sessions are swapped in
// quanta of several turns, each long enough that the re-prefill of a
// session swapped back in is paid for by the turns it then runs from cache.
//
//   - A session is live from its request's placement until it has most
//     likely ended, judged by the pauses between turns seen (liveIdle); a
//     live session is never parked.
//   - A session that is not live and fits nowhere waits, first come first
//     served; a later one that fits may pass a waiter that does not, until
//     that waiter has aged (admission_queue.go).
//   - A session that has held its room for a quantum while others wait
//     gives it up at the end of a turn; its next request waits its turn.
//   - No request waits longer than the timeout: then it goes where it
//     costs least (room if some appeared, else the least overfull
//     replica), taking no live session's room.
//   - The queue is bounded: past queue_max a request is refused (503 with
//     Retry-After).
//   - In mode auto (the default) all this is engaged only while the live
//     context exceeds the caches (admission_auto.go); otherwise, and in
//     mode spill, nobody waits and cost merely prefers replicas with room.
//
// Used by policy cost (and, for the live context, every policy that
// decides from the cost model).

// admissionState is admission's part of the cost model (under m.mu).
type admissionState struct {
	cfg     config.AdmissionConfig
	engaged bool // parking now (always in queue mode; auto: with hysteresis)
	parked  []*Wait

	// counters (metrics, status)
	waits, rejected, timedOut, yields, evicted, released uint64
	waited                                               Histogram // waits that ended (granted, timed out or cancelled), seconds
	maxWait                                              float64
	engagedSince                                         int64
	loadAvg                                              float64 // the live load's average (admission_auto.go)
	loadAt                                               int64   // when it was last updated
	switches                                             uint64  // auto: times engaged
}

// SetAdmission changes admission (zero fields keep their defaults).
func (m *Model) SetAdmission(c config.AdmissionConfig) error {
	if _, err := config.ParseAdmissionMode(string(c.Mode)); err != nil {
		return err
	}
	if c.QueueMax <= 0 {
		c.QueueMax = config.DefaultAdmission.QueueMax
	}
	if c.Timeout <= 0 {
		c.Timeout = config.DefaultAdmission.Timeout
	}
	if c.Fill <= 0 {
		c.Fill = config.DefaultAdmission.Fill
	}
	if c.Quantum <= 0 {
		c.Quantum = config.DefaultAdmission.Quantum
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a := &m.peer.admission
	a.cfg = c
	switch c.Mode {
	case config.AdmissionQueue:
		a.engaged = true
	case config.AdmissionSpill, config.AdmissionOff:
		a.engaged = false
	}
	if !a.engaged {
		m.releaseAllParked()
	}
	return nil
}

// Admission returns the admission settings.
func (m *Model) Admission() config.AdmissionConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peer.admission.cfg
}

// admits says whether replica i has room for session s's prompt; call with
// m.mu held.
func (m *Model) admits(s *peerSession, i int, prompt float64) bool {
	if m.peer.admission.cfg.Mode == config.AdmissionOff {
		return true
	}
	if s != nil && s.replica == i && (s.live > 0 || s.inflight > 0) {
		return true // already counted there
	}
	return m.physical(i)+m.room(i, prompt) <= m.peer.admission.cfg.Fill*m.capacity(i)
}

// Wait is a request parked at the warden by admission. The caller waits
// for Ready, Deadline (then the request is placed where it costs least) or
// its client going away, then calls Claim (or Cancel).
type Wait struct {
	// Ready is closed when a replica has room for the request.
	Ready <-chan struct{}
	// Since is when the request was parked.
	Since time.Time
	// Deadline is when the request must be placed, room or not (Since plus
	// the admission timeout).
	Deadline time.Time

	ready    chan struct{}
	order    int64 // queue position: Since less what its session waited before (aging)
	req      Request
	prompt   float64
	hash     uint64
	replica  int     // reserved replica once granted
	reserved float64 // tokens reserved there
	granted  bool
	claimed  bool
}

// Admit is Place under admission: it places the request at once, or, when
// a cost-model policy runs with admission engaged and no replica has room
// for a session that is not live (or others wait before it), parks it and
// returns a Wait (Placement zero). It returns an *AdmissionFullError (Is
// ErrAdmissionFull) when the queue is full (answer 503 with Retry-After).
// Otherwise it is Place.
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

// parks says whether admission can park r's session (policy cost or
// sticky, and nothing overrides it); call with m.mu held.
func (m *Model) parks(r Request) bool {
	return m.admissionPlaces(r) && m.conversationOf(r).key != 0
}

// admissionPlaces says whether admission decides for r: the active policy
// is one that parks (admissionPolicy), affinity is on, no client pin
// overrides it, r is a prompt and the mode parks (queue or auto); call
// with m.mu held.
func (m *Model) admissionPlaces(r Request) bool {
	mode := m.peer.admission.cfg.Mode
	return admissionPolicy(m.policy) && m.affinity && r.PinnedHeader == "" && !r.NonInference &&
		(mode == config.AdmissionQueue || mode == config.AdmissionAuto)
}

// admissionPolicy says whether policy p parks sessions under admission:
// cost, and sticky (policy_sticky_admission.go). The other cost-model
// policies are llm-d's and SGLang's rules as those projects run them.
func admissionPolicy(p config.Policy) bool {
	return p == config.PolicyCost || p == config.PolicySticky
}

// maybePark parks r if admission says so; call with m.mu held.
func (m *Model) maybePark(r Request) (*Wait, error) {
	if !m.parks(r) {
		return nil, nil
	}
	now := r.Now.UnixNano()
	h := m.conversationOf(r).key
	s := m.peer.sessions[h]
	if s != nil && (s.live > 0 || s.inflight > 0) {
		return nil, nil // a live session is never parked
	}
	if m.oversize(r) {
		return nil, nil // no room would ever hold it (costmodel.go)
	}
	prompt := m.promptTokens(r)
	a := &m.peer.admission
	m.updateEngaged(now)
	if !a.engaged {
		return nil, nil
	}
	if m.admitsNow(s, prompt, now) {
		return nil, nil
	}
	if len(a.parked) >= a.cfg.QueueMax {
		a.rejected++
		return nil, &AdmissionFullError{RetryAfter: m.retryAfter(now)}
	}
	ch := make(chan struct{})
	w := &Wait{Ready: ch, Since: r.Now, Deadline: r.Now.Add(a.cfg.Timeout), ready: ch, req: r, prompt: prompt, hash: h,
		replica: -1, order: now}
	if s != nil {
		w.order -= int64(s.waited * 1e9)
	}
	m.enqueue(w)
	a.waits++
	return w, nil
}

// Claim places a parked request: on the replica that has room once Ready
// is closed, or, called before that (the timeout passed), where it costs
// least without taking anyone's room: the least overfull replica (if room
// appeared meanwhile, there). Call it once per Wait, with the time it is
// called.
func (m *Model) Claim(w *Wait, now time.Time) (Placement, error) {
	m.mu.Lock()
	if w.claimed {
		m.mu.Unlock()
		return Placement{Replica: -1, RankHeader: -1}, ErrWaitClaimed
	}
	w.claimed = true
	m.release(w)
	m.noteWait(w, now)
	if !w.granted {
		m.peer.admission.timedOut++
	}
	m.mu.Unlock()
	r := w.req
	r.arrived, r.Now = r.Now, now
	r.waited = now.Sub(w.Since).Seconds()
	if w.granted && w.replica >= 0 {
		r.roomOn = w.replica + 1
	}
	return m.Place(r)
}

// Cancel drops a parked request (its client went away): its place in the
// queue, or the room granted to it, goes to the next waiter at once.
func (m *Model) Cancel(w *Wait) { m.Abandon(w, time.Time{}) }

// Abandon is Cancel with the time the client left, which counts its wait
// in the admission stats (zero: it does not).
func (m *Model) Abandon(w *Wait, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.claimed {
		return
	}
	w.claimed = true
	m.release(w)
	at := w.Since
	if !now.IsZero() {
		m.noteWait(w, now)
		at = now
	}
	m.admitParked(at.UnixNano())
}

// release returns w's reservation or takes it out of the queue; call with
// m.mu held.
func (m *Model) release(w *Wait) {
	a := &m.peer.admission
	if w.granted {
		if w.reserved > 0 {
			pr := &m.peer.reps[w.replica]
			pr.live -= w.reserved
			pr.liveN--
		}
		w.reserved = 0
		return
	}
	for k, x := range a.parked {
		if x == w {
			a.parked = append(a.parked[:k], a.parked[k+1:]...)
			return
		}
	}
}

// noteWait records how long w waited.
func (m *Model) noteWait(w *Wait, now time.Time) {
	a := &m.peer.admission
	d := max(0, now.Sub(w.Since).Seconds())
	if a.waited.bounds == nil {
		a.waited = NewHistogram(parkedBuckets)
	}
	a.waited.Observe(d)
	a.maxWait = max(a.maxWait, d)
}

// releaseAllParked grants every parked request at once (admission was
// switched off: nobody waits any more); call with m.mu held.
func (m *Model) releaseAllParked() {
	a := &m.peer.admission
	for _, w := range a.parked {
		close(w.ready) // granted without a reservation: Claim places it
		w.granted = true
	}
	a.parked = nil
}

// AdmissionFullError is Admit's refusal when the queue is full: answer 503
// with Retry-After.
type AdmissionFullError struct {
	RetryAfter time.Duration // when room is likely (at least a second)
}

func (e *AdmissionFullError) Error() string { return ErrAdmissionFull.Error() }

// Is makes errors.Is(err, ErrAdmissionFull) true.
func (e *AdmissionFullError) Is(target error) bool { return target == ErrAdmissionFull }

// retryAfter is how long a refused request should wait before it asks
// again: the time the oldest waiter has left before it is placed
// (whatever happens, the queue moves by then), at least a second.
func (m *Model) retryAfter(now int64) time.Duration {
	a := &m.peer.admission
	d := a.cfg.Timeout
	for _, w := range a.parked {
		d = min(d, time.Duration(w.Deadline.UnixNano()-now))
	}
	return max(time.Second, d.Round(time.Second))
}

// AdmissionStats are admission's counters.
type AdmissionStats struct {
	Mode     config.AdmissionMode
	Engaged  bool   // parking now
	Parked   int    // waiting now
	Waits    uint64 // ever parked
	Rejected uint64 // refused, queue full
	TimedOut uint64 // placed at the timeout
	Yields   uint64 // sessions that gave up their room after a quantum
	Evicted  uint64 // sessions whose room a request at its timeout took
	Released uint64 // sessions that had likely ended whose room a waiter took
	Switches uint64 // auto: times admission engaged
	// OldestWait is how long the oldest parked request has waited (s).
	OldestWait float64
	// WaitP50, WaitP95, MaxWait: waits that ended, seconds (NaN: none).
	WaitP50, WaitP95, MaxWait float64
	// LiveLoad is the live load's average that mode auto switches on
	// (admission_auto.go): live context over the replicas' capacity.
	LiveLoad float64
	// SharedPrefix is the learned prefix every session shares (tokens).
	SharedPrefix float64
	// Live and Budget are, per replica, the context of its live sessions
	// (and rooms granted to waiters), the shared prefix once, and what they
	// may hold: fill × its KV capacity (tokens).
	Live, Budget []float64
}

// AdmissionStats reads admission's counters.
func (m *Model) AdmissionStats() AdmissionStats {
	return m.AdmissionStatsAt(time.Now())
}

// AdmissionStatsAt is AdmissionStats with the oldest wait taken at now.
func (m *Model) AdmissionStatsAt(now time.Time) AdmissionStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := &m.peer.admission
	st := AdmissionStats{Mode: a.cfg.Mode, Engaged: a.engaged, Parked: len(a.parked), Waits: a.waits, Rejected: a.rejected,
		TimedOut: a.timedOut, Yields: a.yields, Evicted: a.evicted, Released: a.released, Switches: a.switches,
		WaitP50: a.waited.Quantile(0.5), WaitP95: a.waited.Quantile(0.95), MaxWait: math.NaN()}
	if a.waited.N > 0 {
		st.MaxWait = a.maxWait
	}
	st.LiveLoad, st.SharedPrefix = a.loadAvg, m.peer.sharedPrefix
	for i := range m.reps {
		st.Live = append(st.Live, m.physical(i))
		st.Budget = append(st.Budget, a.cfg.Fill*m.capacity(i))
	}
	for _, w := range a.parked {
		st.OldestWait = max(st.OldestWait, now.Sub(w.Since).Seconds())
	}
	return st
}
