package agent

import (
	"time"
)

// The cost model: what the cost-aware policies (cost, cache-aware,
// sticky-until-saturated) and cache-capacity admission share. It is the
// Model's, not one policy's, because it learns from every poll whichever
// policy is active (a switch to cost at run time finds the replicas'
// prefill rate and capacity already learned), and because the three
// policies and admission read and book the same numbers.

// peerState is the cost model's state beside the session table: per
// replica, the predicted prefill backlog, the learned rate and capacity
// and the live context; per session, its context size, where its cache is
// and when its last turn ran. It lives under m.mu.
type peerState struct {
	reps     []peerRep
	sessions map[uint64]*peerSession
	order    []uint64 // sessions in insertion order, for the sweep
	cursor   int

	// sharedPrefix is the prompt prefix every replica holds (the system
	// prompt). It is 0 until a learning rule exists (docs/placement.md):
	// assuming nothing shared only biases toward staying, like hysteresis.
	sharedPrefix float64
	meanUncached float64 // uncached prompt tokens per request, learned
	rate         float64 // prefill tokens/s, learned (0: prior)
	// decayed sums behind rate and meanUncached (policy_cost.go)
	rateTokens, rateSeconds, rateCount float64
	rateAt                             int64 // when they were last decayed (unix ns)
	// gap is a session's pause between a turn's end and its next request
	// (EWMA, seconds): a session idle for much longer has ended or gone to
	// think, and its context no longer counts as live.
	gap float64

	scratch []float64 // pickCost's per-replica predictions

	admission AdmissionConfig
	parked    []*Wait
	waits     uint64 // requests ever parked (metrics)
	rejected  uint64 // queue full
	timedOut  uint64 // placed after the timeout without room
}

// peerSession is one session as the cost model sees it.
type peerSession struct {
	replica   int     // where its cache is (its latest turn ran there)
	ctx       float64 // its context after its latest turn (prompt + reply allowance)
	prompt    float64 // the prompt in flight (for inflightCtx)
	pending   float64 // its predicted uncached tokens (for inflightNew)
	touchedAt float64 // its replica's LRU clock after its latest turn
	lastPlace int64
	lastEnd   int64
	inflight  int
	live      float64 // context counted in reps[replica].live (0: not live)
}

func newPeerState(replicas int) *peerState {
	return &peerState{
		reps:      make([]peerRep, replicas),
		sessions:  make(map[uint64]*peerSession),
		admission: DefaultAdmission,
	}
}

// liveIdle is how long after its last turn a session still counts as
// live: many times the pause sessions take between turns, at least
// minLiveIdle, at most the session TTL.
const (
	minLiveIdle   = 2 * time.Second
	liveIdleGaps  = 20
	peerSweepStep = 4
)

func (m *Model) liveIdle() int64 {
	d := max(minLiveIdle, time.Duration(m.peer.gap*liveIdleGaps*1e9))
	return int64(min(d, m.cfg.SessionTTL))
}

// peerSweep ends the liveness of quiet sessions and forgets expired ones,
// a few a call (amortised like the session table's sweep).
func (m *Model) peerSweep(now int64, budget int) {
	ps := m.peer
	idle, ttl := m.liveIdle(), int64(m.cfg.SessionTTL)
	for ; budget > 0 && len(ps.order) > 0; budget-- {
		if ps.cursor >= len(ps.order) {
			ps.cursor = 0
		}
		h := ps.order[ps.cursor]
		s := ps.sessions[h]
		last := max(s.lastEnd, s.lastPlace)
		if s.inflight == 0 && s.live > 0 && now-last > idle {
			m.setLive(s, 0)
		}
		if s.inflight == 0 && now-last > ttl {
			delete(ps.sessions, h)
			ps.order[ps.cursor] = ps.order[len(ps.order)-1]
			ps.order = ps.order[:len(ps.order)-1]
			continue
		}
		ps.cursor++
	}
}

// setLive counts ctx tokens of s as live on its replica (0: none).
func (m *Model) setLive(s *peerSession, ctx float64) {
	if s.live > 0 {
		m.peer.reps[s.replica].live -= s.live
	}
	s.live = ctx
	if ctx > 0 {
		m.peer.reps[s.replica].live += ctx
	}
}

// peerRecord books a placement of session h (0: none) with a prompt of
// the given tokens on replica i: the backlog, the LRU clock, the live
// context; call with m.mu held.
func (m *Model) peerRecord(h uint64, s *peerSession, i int, prompt float64, now int64) {
	pr := &m.peer.reps[i]
	pr.drain(now, m.prefillRate(i))
	u := m.uncached(s, i, prompt)
	pr.backlog += u
	pr.inflightCtx += prompt
	pr.touched += prompt
	if h == 0 {
		pr.unaffinedNew += u // no Done hook finds it: it only decays with the backlog
		return
	}
	pr.inflightNew += u
	if s == nil {
		s = &peerSession{replica: i}
		m.peer.sessions[h] = s
		m.peer.order = append(m.peer.order, h)
	} else if s.inflight == 0 && s.lastEnd > 0 {
		gap := float64(now-s.lastEnd) / 1e9
		if m.peer.gap == 0 {
			m.peer.gap = gap
		} else {
			m.peer.gap += 0.05 * (gap - m.peer.gap)
		}
	}
	if s.replica != i {
		m.setLive(s, 0)
		s.replica = i
	}
	m.setLive(s, prompt+outputAllowance)
	s.ctx = prompt
	s.prompt = prompt
	s.pending = u
	s.touchedAt = pr.touched
	s.lastPlace = now
	s.inflight++
}

// peerDone is Done's hook: the request's context leaves the in-flight
// sum, the session's context grows by the reply; call with m.mu held.
func (m *Model) peerDone(p Placement, now time.Time) {
	if p.Replica < 0 || p.Replica >= len(m.reps) || p.SessionHash == 0 {
		return
	}
	s, ok := m.peer.sessions[p.SessionHash]
	if !ok {
		return
	}
	pr := &m.peer.reps[p.Replica]
	pr.inflightCtx = max(0, pr.inflightCtx-s.prompt)
	pr.inflightNew = max(0, pr.inflightNew-s.pending)
	if s.inflight > 0 {
		s.inflight--
	}
	t := now.UnixNano()
	if s.lastPlace > 0 && t > s.lastPlace {
		d := float64(t-s.lastPlace) / 1e9
		if pr.turnSeconds == 0 {
			pr.turnSeconds = d
		} else {
			pr.turnSeconds += rateEWMA * (d - pr.turnSeconds)
		}
	}
	s.lastEnd = t
	if s.replica == p.Replica {
		s.ctx = s.prompt + outputAllowance
		s.touchedAt = pr.touched
	}
	m.admitParked(t)
}

// peerObserve is ObserveReplica's hook; call with m.mu held.
func (m *Model) peerObserve(i int, s ReplicaMetrics, now time.Time) {
	m.costObserve(i, s, now)
	m.peerSweep(now.UnixNano(), peerSweepStep)
	m.admitParked(now.UnixNano())
}

// costChooser is a policy that decides from the cost model: Model.pickBooked
// gives it the session's cost-model entry and the prompt size, then books
// what it chose.
type costChooser interface {
	// choose returns the replica for a prompt of the given tokens of
	// session s (nil: new, or no session id), or -1 to leave it to the
	// least-loaded replica; call with m.mu held.
	choose(m *Model, s *peerSession, prompt float64, now int64) int
}

// pickBooked is pick for the policies that decide from the cost model:
// it lets c choose and books the placement in the cost model.
func (m *Model) pickBooked(c costChooser, h uint64, r Request) int {
	now := r.Now.UnixNano()
	m.peerSweep(now, peerSweepStep)
	prompt := m.promptTokens(r)
	var s *peerSession
	if h != 0 {
		s = m.peer.sessions[h]
	}
	i := c.choose(m, s, prompt, now)
	if i < 0 {
		i = m.leastLoaded(-1)
	}
	m.peerRecord(h, s, i, prompt, now)
	return i
}

// CostEstimates are what the cost model has learned, for the admin API and
// for checking it against a known replica (the simulator's profile).
type CostEstimates struct {
	PrefillRate  float64   // tokens/s (0: nothing learned yet)
	MeanUncached float64   // uncached prompt tokens a request
	Capacity     []float64 // KV tokens per replica, as placement uses it
	Live         []float64 // live context per replica (admission)
}

// CostEstimates returns the cost model's learned numbers.
func (m *Model) CostEstimates() CostEstimates {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := CostEstimates{PrefillRate: m.peer.rate, MeanUncached: m.peer.meanUncached}
	for i := range m.reps {
		e.Capacity = append(e.Capacity, m.capacity(i))
		e.Live = append(e.Live, m.peer.reps[i].live)
	}
	return e
}
