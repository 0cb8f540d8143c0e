package placement

import (
	"math"
	"slices"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
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

	// sharedPrefix is the prompt prefix every session shares (the system
	// prompt and tool definitions), learned from the replicas' KV usage
	// (learnShared): a replica holds it once however many sessions it
	// serves, so admission counts it once per replica.
	sharedPrefix  float64
	sharedSamples []float64 // the last samples of it (a ring), and a sorted copy
	sharedSorted  []float64
	sharedNext    int
	firstPrompt   float64 // mean prompt of a session's first request (EWMA): sharedPrefix stays under it
	meanUncached  float64 // uncached prompt tokens per request, learned
	rate          float64 // prefill tokens/s, learned (0: prior)
	// decayed sums behind rate and meanUncached (policy_cost.go)
	rateTokens, rateSeconds, rateCount float64
	rateAt                             int64 // when they were last decayed (unix ns)
	// gaps are the pauses sessions take between a turn's end and their
	// next request: a session idle for much longer than nearly all of them
	// has ended or gone to think, and its context no longer counts as live.
	gaps    gapQuantiles
	gapMean float64 // their mean (EWMA, seconds)

	scratch []float64 // pickCost's per-replica predictions

	admission admissionState // admission.go
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
	// prefilled is when the prefill of its request in flight has most
	// likely ended (learnShared).
	prefilled int64
	inflight  int
	live      float64 // context counted in reps[replica].live (0: not live)
	// heldSince is when the session's room on its replica was granted
	// (its context became live there): how long it has held it, for the
	// quantum (admission_queue.go).
	heldSince int64
	// leaving: its room went to a request at its timeout while its turn
	// ran; it gives it up when the turn ends.
	leaving bool
	hold    int     // index in its replica's holders while live (-1: none)
	waited  float64 // seconds its requests waited at the warden, in all
	// likelyEnded marks a session victims found idle long enough to have
	// likely ended (for the counters).
	likelyEnded bool
	// oversize: its latest prompt was larger than any replica's cache
	// (oversize): nothing of it is cached after its turn.
	oversize bool
}

func newPeerState(replicas int) *peerState {
	return &peerState{
		reps:      make([]peerRep, replicas),
		sessions:  make(map[uint64]*peerSession),
		admission: admissionState{cfg: config.DefaultAdmission},
	}
}

// liveIdle is how long after its last turn a session still counts as
// live: until it has most likely ended, the idle time after which
// liveEndedShare of the sessions so idle have ended and not come back
// (gapQuantiles.likelyEnded: the pauses between turns seen, and the
// share of turn ends that were a session's last), at least minLiveIdle,
// at most the session TTL. While too few turn ends are known, liveIdleGaps
// times the mean pause.
//
// A session that has ended keeps its room until then, and cost places
// new sessions by the rooms taken: a window of 20 mean pauses, right
// for sessions that came back within tens of milliseconds, kept agents'
// finished sessions live for about 75 s (tool time of 0.1-20 s between
// turns), most of a six-turn task, so new sessions avoided the replicas
// whose sessions had just finished and crowded the others
// (docs/placement.md, "Liveness"). When others wait for room, a session
// idle so long that it has more likely ended than not gives its room up
// sooner still (admission_queue.go, makeRoom).
const (
	minLiveIdle    = 2 * time.Second
	liveIdleGaps   = 20
	liveEndedShare = 0.8
	peerSweepStep  = 4
)

func (m *Model) liveIdle() int64 {
	d := max(minLiveIdle, time.Duration(m.peer.gapMean*liveIdleGaps*1e9))
	if t, ok := m.peer.gaps.likelyEnded(liveEndedShare); ok {
		d = max(minLiveIdle, time.Duration(t*1e9))
	}
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
		if s == nil { // forgotten with its table entry (peerForget)
			ps.order[ps.cursor] = ps.order[len(ps.order)-1]
			ps.order = ps.order[:len(ps.order)-1]
			continue
		}
		last := max(s.lastEnd, s.lastPlace)
		if s.inflight == 0 && s.live > 0 && now-last > idle {
			m.setLive(s, 0, now)
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

// peerForget drops session h from the cost model's records when it leaves
// the session table (evicted or expired), unless a request of it is in
// flight: so a flood of session ids leaves no more behind here than the
// table's bound. Its place in ps.order goes at the sweep's next pass.
func (m *Model) peerForget(h uint64) {
	s := m.peer.sessions[h]
	if s == nil || s.inflight > 0 {
		return
	}
	m.setLive(s, 0, 0)
	delete(m.peer.sessions, h)
}

// setLive counts ctx tokens of s as live on its replica (0: none); a
// session that was not live there starts holding its room now.
func (m *Model) setLive(s *peerSession, ctx float64, now int64) {
	pr := &m.peer.reps[s.replica]
	if s.live > 0 {
		pr.live -= s.live
		pr.liveN--
		if ctx == 0 {
			pr.dropHolder(s)
		}
	} else if ctx > 0 {
		s.heldSince = now
		s.hold = len(pr.holders)
		pr.holders = append(pr.holders, s)
	}
	s.live = ctx
	if ctx > 0 {
		pr.live += ctx
		pr.liveN++
	}
}

// dropHolder takes s out of the replica's live sessions.
func (pr *peerRep) dropHolder(s *peerSession) {
	last := len(pr.holders) - 1
	if s.hold < 0 || s.hold > last || pr.holders[s.hold] != s {
		return
	}
	pr.holders[s.hold] = pr.holders[last]
	pr.holders[s.hold].hold = s.hold
	pr.holders[last] = nil
	pr.holders = pr.holders[:last]
	s.hold = -1
}

// expireLive ends the liveness of replica i's sessions idle for longer
// than liveIdle (their rooms free for others).
func (m *Model) expireLive(i int, now int64) {
	idle := m.liveIdle()
	m.endLiveWhere(i, now, func(s *peerSession) bool {
		return s.inflight == 0 && !s.leaving && now-max(s.lastEnd, s.lastPlace) > idle
	})
}

// endLiveWhere ends the liveness of the conversations live on replica i
// for which ends says so; call with m.mu held.
func (m *Model) endLiveWhere(i int, now int64, ends func(*peerSession) bool) {
	pr := &m.peer.reps[i]
	for k := 0; k < len(pr.holders); {
		if s := pr.holders[k]; ends(s) {
			m.setLive(s, 0, now) // moves the last holder to k
			continue
		}
		k++
	}
}

// physical is the KV cache replica i's live sessions (and the rooms
// granted to parked requests) take: their contexts, with the shared
// prefix counted once.
func (m *Model) physical(i int) float64 {
	pr := &m.peer.reps[i]
	return pr.live - m.peer.sharedPrefix*float64(max(0, pr.liveN-1))
}

// room is what a session with a prompt of the given tokens, not yet live
// on replica i, would add to physical(i).
func (m *Model) room(i int, prompt float64) float64 {
	need := prompt + outputAllowance
	if m.peer.reps[i].liveN > 0 {
		need -= m.peer.sharedPrefix
	}
	return need
}

// peerRecord books a placement of session h (0: none) with a prompt of
// the given tokens on replica i: the backlog, the LRU clock, the live
// context; call with m.mu held. arrived is when the request reached the
// warden (before any wait at it), for the pause since the session's last
// turn.
func (m *Model) peerRecord(h uint64, s *peerSession, i int, prompt float64, now, arrived int64) {
	pr := &m.peer.reps[i]
	pr.drain(now, m.prefillRate(i))
	u := m.uncached(s, i, prompt)
	pr.backlog += u
	if !pr.allocCounted {
		pr.touched += prompt // no counters: every prompt token placed may have taken a block
	}
	if h == 0 {
		pr.unaffinedNew += u // no Done hook finds it: it only decays with the backlog
		return
	}
	pr.inflightCtx += prompt
	pr.inflightN++
	pr.inflightNew += u
	// its prefill has most likely ended once the backlog here (its own
	// included) has drained at the learned rate, with a margin
	prefilled := now + int64(sharedSettle*pr.backlog/m.prefillRate(i)*1e9)
	if s == nil {
		s = &peerSession{replica: i, hold: -1}
		m.peer.sessions[h] = s
		m.peer.order = append(m.peer.order, h)
		if m.peer.firstPrompt == 0 {
			m.peer.firstPrompt = prompt
		} else {
			m.peer.firstPrompt += 0.05 * (prompt - m.peer.firstPrompt)
		}
	} else if s.inflight == 0 && s.lastEnd > 0 && arrived >= s.lastEnd {
		gap := float64(arrived-s.lastEnd) / 1e9
		m.peer.gaps.add(gap)
		if m.peer.gapMean == 0 {
			m.peer.gapMean = gap
		} else {
			m.peer.gapMean += 0.05 * (gap - m.peer.gapMean)
		}
	}
	if s.replica != i {
		m.setLive(s, 0, now)
		s.replica = i
	}
	m.setLive(s, prompt+outputAllowance, now)
	s.ctx = prompt
	s.prompt = prompt
	s.pending = u
	s.touchedAt = pr.touched
	s.lastPlace = now
	s.prefilled = prefilled
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
	pr.inflightN = max(0, pr.inflightN-1)
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
	if s.replica == p.Replica && !s.oversize {
		s.ctx = s.prompt + outputAllowance
		s.touchedAt = pr.touched
	}
	if s.inflight == 0 {
		m.peer.gaps.ended()
		if s.leaving {
			s.leaving = false
			m.setLive(s, 0, t)
		}
		m.maybeYield(s, t)
	}
	m.admitParked(t)
}

// peerObserve is ObserveReplica's hook; call with m.mu held.
func (m *Model) peerObserve(i int, s ReplicaMetrics, now time.Time) {
	m.costObserve(i, s, now)
	m.learnShared(i, s, now.UnixNano())
	m.expireLive(i, now.UnixNano())
	m.peerSweep(now.UnixNano(), peerSweepStep)
	m.admissionTick(now.UnixNano())
}

// learnShared estimates the shared prefix from replica i's KV usage. With
// n ≥ 2 of the warden's session requests running there and nothing else
// running or waiting, the blocks in use hold their prompts with the
// shared prefix once: usage × capacity = Σ prompts − (n−1) · shared, less
// what is still to prefill (vLLM allocates a prompt's blocks chunk by
// chunk) and plus the output generated so far, neither of which the
// warden sees. Only samples where every request's prefill is most likely
// done count: each has been in flight for sharedSettle times the
// replica's mean time to first token, and for sharedSettle times the
// prefill that was queued there when it was placed, its own included, at
// the learned rate. The mean TTFT alone is not enough where cold
// prefills are long and most turns are cached: on the 27B box (2.5 s
// cached, 55 s cold) most samples were taken mid-prefill, the estimate
// came out at 20-35k tokens instead of 3.5k, and admission fitted four
// 51k sessions on a replica that holds two (docs/placement.md). A
// prompt still prefilling makes a sample too high, outputs make it a
// little low, so the estimate is a low quantile (sharedQuantile) of the
// last sharedSamples samples, each capped at sharedCap of the mean first
// prompt (nothing can share more than a new session sends).
const (
	sharedSettle   = 1.5 // times the replica's mean time to first token, and the prefill queued at placement
	sharedSamples  = 128
	sharedQuantile = 0.1
	sharedCap      = 0.9
)

func (m *Model) learnShared(i int, st ReplicaMetrics, now int64) {
	pr := &m.peer.reps[i]
	n := pr.inflightN
	if n < 2 || st.Waiting > 0 || st.Running != float64(n) || st.KVCapacityTokens <= 0 || st.KVUsage <= 0 || pr.ttft <= 0 {
		return
	}
	for _, s := range pr.holders {
		if s.inflight > 0 && (float64(now-s.lastPlace)/1e9 < sharedSettle*pr.ttft || now < s.prefilled) {
			return // perhaps still prefilling: its prompt's blocks are not all allocated yet
		}
	}
	est := (pr.inflightCtx - st.KVUsage*st.KVCapacityTokens) / float64(n-1)
	est = math.Max(0, math.Min(est, sharedCap*m.peer.firstPrompt))
	ps := m.peer
	if len(ps.sharedSamples) < sharedSamples {
		ps.sharedSamples = append(ps.sharedSamples, est)
	} else {
		ps.sharedSamples[ps.sharedNext] = est
		ps.sharedNext = (ps.sharedNext + 1) % sharedSamples
	}
	sorted := append(ps.sharedSorted[:0], ps.sharedSamples...)
	slices.Sort(sorted)
	ps.sharedSorted = sorted
	ps.sharedPrefix = sorted[int(sharedQuantile*float64(len(sorted)-1))]
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
	var s *peerSession
	if h != 0 {
		s = m.peer.sessions[h]
	}
	i := -1
	if !m.oversize(r) {
		i = c.choose(m, s, m.promptTokens(r), now)
	}
	if i < 0 {
		i = m.leastLoaded(-1)
	}
	if s := m.book(h, i, r); s != nil && m.peer.admission.engaged {
		m.keepWithin(i, s, now)
	}
	return i
}

// book records request r of session h (0: none) placed on replica i in
// the cost model and returns its session's entry (nil: none, or its
// prompt is larger than any cache); call with m.mu held.
func (m *Model) book(h uint64, i int, r Request) *peerSession {
	now := r.Now.UnixNano()
	arrived := now
	if !r.arrived.IsZero() {
		arrived = r.arrived.UnixNano()
	}
	big := m.oversize(r)
	if h == 0 {
		m.peerRecord(0, nil, i, m.promptTokens(r), now, arrived)
		return nil
	}
	m.peerRecord(h, m.peer.sessions[h], i, m.promptTokens(r), now, arrived)
	s := m.peer.sessions[h] // peerRecord creates a new session's entry
	s.oversize = big
	if big { // it holds no room, and nothing of it stays cached
		m.setLive(s, 0, now)
		s.ctx = 0
		return nil
	}
	s.waited += r.waited
	return s
}

// CostEstimates are what the cost model has learned, for the admin API and
// for checking it against a known replica (the simulator's profile).
type CostEstimates struct {
	PrefillRate  float64   // tokens/s (0: nothing learned yet)
	MeanUncached float64   // uncached prompt tokens a request
	SharedPrefix float64   // tokens every session shares, held once a replica
	Capacity     []float64 // KV tokens per replica, as placement uses it
	Live         []float64 // live context per replica, the shared prefix counted once (admission)
}

// CostEstimates returns the cost model's learned numbers.
func (m *Model) CostEstimates() CostEstimates {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := CostEstimates{PrefillRate: m.peer.rate, MeanUncached: m.peer.meanUncached, SharedPrefix: m.peer.sharedPrefix}
	for i := range m.reps {
		e.Capacity = append(e.Capacity, m.capacity(i))
		e.Live = append(e.Live, m.physical(i))
	}
	return e
}

// peerForgetContext says that conversation h's context starts over:
// nothing of its history is cached anywhere (the shared prefix aside).
func (m *Model) peerForgetContext(h uint64) {
	if s := m.peer.sessions[h]; s != nil {
		s.ctx = 0
	}
}

// oversize says that r's prompt is larger than any replica's KV cache
// (call with m.mu held): no replica can hold it, so it is never cached
// anywhere, takes no room, and waits for none (vLLM refuses a prompt
// longer than its max_model_len, which is at most its cache; such a
// request is placed by load and answered by the replica).
func (m *Model) oversize(r Request) bool {
	if r.PromptBytes <= 0 {
		return false
	}
	largest := 0.0
	for i := range m.reps {
		if m.reps[i].healthy {
			largest = max(largest, m.capacity(i))
		}
	}
	return largest > 0 && float64(r.PromptBytes)/bytesPerToken > largest
}
