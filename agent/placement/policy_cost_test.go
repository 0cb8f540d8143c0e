package placement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

var costEpoch = time.Unix(1_700_000_000, 0).UTC()

// mustCostModel is a 4-replica model on policy p whose replicas report a KV
// capacity of capTokens.
func mustCostModel(tb testing.TB, p config.Policy, capTokens float64) *Model {
	tb.Helper()
	m := mustModel(tb, func(mc *config.ModelConfig) { mc.Policy = p })
	for i := range m.Replicas() {
		m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: capTokens}, costEpoch)
	}
	return m
}

// queueOn stands for requests in flight on a replica that still have
// tokens to prefill (the backlog never exceeds what is in flight).
func queueOn(pr *peerRep, tokens float64, at time.Time) {
	pr.backlog, pr.backlogAt, pr.inflightNew = tokens, at.UnixNano(), tokens
}

// prompt of n tokens at bytesPerToken.
func promptBytes(n int) int64 { return int64(n * bytesPerToken) }

func TestCostSpreadsSimultaneousNewSessionsOnePerReplica(t *testing.T) {
	m := mustCostModel(t, config.PolicyCost, 40_000)
	seen := map[int]bool{}
	for k := range 4 {
		p := mustPlace(t, m, Request{SessionID: fmt.Sprint("s", k), PromptBytes: promptBytes(11_000), Now: costEpoch})
		seen[p.Replica] = true
	}
	if len(seen) != 4 {
		t.Fatalf("4 new sessions landed on %d replicas, want 4", len(seen))
	}
}

func TestCostKeepsASessionOnTheReplicaThatHoldsItsCache(t *testing.T) {
	m := mustCostModel(t, config.PolicyCost, 40_000)
	now := costEpoch
	first := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_000), Now: now})
	for turn := 1; turn < 6; turn++ {
		now = now.Add(10 * time.Second)
		m.Done(first, now)
		now = now.Add(50 * time.Millisecond)
		p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_000 + 650*turn), Now: now})
		if p.Replica != first.Replica {
			t.Fatalf("turn %d went to replica %d, its cache is on %d", turn, p.Replica, first.Replica)
		}
		first = p
	}
}

func TestCostMovesASessionWhoseCacheWasEvicted(t *testing.T) {
	// Replica capacity 20k: after a 12k session a returns, 3 more 12k
	// sessions pass through its replica, so LRU has pushed a out; with a
	// backlog queued there, another idle replica is cheaper.
	m := mustCostModel(t, config.PolicyCost, 20_000)
	now := costEpoch
	a := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(12_000), Now: now})
	m.Done(a, now.Add(time.Second))
	pr := &m.peer.reps[a.Replica]
	pr.touched += 36_000 // three other sessions' prompts since a's turn
	if h := m.held(m.peer.sessions[m.HashSession("a")]); h != 0 {
		t.Fatalf("held = %.0f tokens after 36k newer tokens on a 20k cache, want 0", h)
	}
	queueOn(pr, 40_000, now.Add(2*time.Second))
	p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(12_700), Now: now.Add(2 * time.Second)})
	if p.Replica == a.Replica {
		t.Fatalf("session stayed on replica %d that no longer holds it and has 40k tokens queued", p.Replica)
	}
}

func TestCostLearnsThePrefillRateFromTheReplicaCounters(t *testing.T) {
	m := mustCostModel(t, config.PolicyCost, 40_000)
	now := costEpoch
	var prompt, ttft, count float64
	for k := range 200 {
		now = now.Add(250 * time.Millisecond)
		if k%4 == 0 { // a cold 10k-token prompt every second, 2.5 s each
			prompt += 10_000
			ttft += 2.5
			count++
		}
		m.ObserveReplica(0, ReplicaMetrics{Healthy: true, KVCapacityTokens: 40_000,
			PromptTokens: prompt, TTFTSum: ttft, TTFTCount: count}, now)
	}
	if got := m.CostEstimates().PrefillRate; math.Abs(got-4000) > 200 {
		t.Fatalf("learned prefill rate %.0f tokens/s, want about 4000", got)
	}
}

func TestAdmissionQueueParksWhatDoesNotFitAndGrantsWhenASessionEnds(t *testing.T) {
	m := mustCostModel(t, config.PolicyCost, 40_000)
	if err := m.SetAdmission(config.AdmissionConfig{Mode: config.AdmissionQueue, QueueMax: 2}); err != nil {
		t.Fatal(err)
	}
	now := costEpoch
	var placed []Placement
	for k := range 12 { // 3 sessions of 11k fit each 40k replica
		p, w, err := m.Admit(Request{SessionID: fmt.Sprint("s", k), PromptBytes: promptBytes(11_000), Now: now})
		if err != nil || w != nil {
			t.Fatalf("session %d: parked=%v err=%v, want placed", k, w != nil, err)
		}
		placed = append(placed, p)
	}
	_, w, err := m.Admit(Request{SessionID: "late", PromptBytes: promptBytes(11_000), Now: now})
	if err != nil || w == nil {
		t.Fatalf("13th session: parked=%v err=%v, want parked", w != nil, err)
	}
	if _, w2, _ := m.Admit(Request{SessionID: "later", PromptBytes: promptBytes(11_000), Now: now}); w2 == nil {
		t.Fatal("14th session not parked behind the 13th")
	}
	if _, _, err := m.Admit(Request{SessionID: "full", PromptBytes: promptBytes(11_000), Now: now}); !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("15th session with a queue of 2: err %v, want ErrAdmissionFull", err)
	}
	select {
	case <-w.Ready:
		t.Fatal("granted before any room freed")
	default:
	}
	// session s0 ends its last turn and stays quiet: its context stops being
	// live after the idle window, and the next poll grants the head.
	m.Done(placed[0], now.Add(time.Second))
	now = now.Add(time.Minute)
	m.ObserveReplica(placed[0].Replica, ReplicaMetrics{Healthy: true, KVCapacityTokens: 40_000}, now)
	for range 10 { // the sweep visits a few sessions a call
		m.ObserveReplica(placed[0].Replica, ReplicaMetrics{Healthy: true, KVCapacityTokens: 40_000}, now)
	}
	select {
	case <-w.Ready:
	default:
		t.Fatal("not granted after a live session ended")
	}
	p, err := m.Claim(w, now)
	if err != nil || p.Replica != placed[0].Replica {
		t.Fatalf("claim: replica %d err %v, want replica %d", p.Replica, err, placed[0].Replica)
	}
	if _, err := m.Claim(w, now); !errors.Is(err, ErrWaitClaimed) {
		t.Fatalf("second claim: %v, want ErrWaitClaimed", err)
	}
	if st := m.AdmissionStats(); st.Parked != 1 || st.Waits != 2 || st.Rejected != 1 {
		t.Fatalf("stats %+v, want 1 parked, 2 waits, 1 rejected", st)
	}
}

func TestAdmissionTimeoutPlacesWhereItCostsLeast(t *testing.T) {
	m := mustCostModel(t, config.PolicyCost, 20_000)
	if err := m.SetAdmission(config.AdmissionConfig{Mode: config.AdmissionQueue}); err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		if _, w, err := m.Admit(Request{SessionID: fmt.Sprint("s", k), PromptBytes: promptBytes(11_000), Now: costEpoch}); w != nil || err != nil {
			t.Fatalf("session %d parked or failed", k)
		}
	}
	_, w, _ := m.Admit(Request{SessionID: "x", PromptBytes: promptBytes(11_000), Now: costEpoch})
	if w == nil {
		t.Fatal("5th session not parked")
	}
	p, err := m.Claim(w, costEpoch.Add(30*time.Second))
	if err != nil || p.Replica < 0 {
		t.Fatalf("claim after timeout: %+v %v", p, err)
	}
	if st := m.AdmissionStats(); st.TimedOut != 1 {
		t.Fatalf("timed out %d, want 1", st.TimedOut)
	}
}

func TestCacheAwareFollowsTheSessionUntilLoadIsImbalanced(t *testing.T) {
	m := mustCostModel(t, config.PolicyCacheAware, 40_000)
	a := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_000), Now: costEpoch})
	m.Done(a, costEpoch.Add(time.Second))
	if p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_600), Now: costEpoch.Add(2 * time.Second)}); p.Replica != a.Replica {
		t.Fatalf("follow-up went to %d, want %d (match above the threshold)", p.Replica, a.Replica)
	}
	for k := range 100 { // 100 more in flight on a's replica: imbalanced
		m.commit(a.Replica, KindBalanced, 0, -1, costEpoch.UnixNano())
		_ = k
	}
	if p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(12_200), Now: costEpoch.Add(3 * time.Second)}); p.Replica == a.Replica {
		t.Fatal("imbalanced load did not move the request to the least-loaded replica")
	}
}

func TestStickyUntilSaturatedLeavesOnlyWhenMoreThanFiveSecondsWorse(t *testing.T) {
	m := mustCostModel(t, config.PolicyStickyUntilSaturated, 40_000)
	a := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_000), Now: costEpoch})
	m.Done(a, costEpoch.Add(time.Second))
	pr := &m.peer.reps[a.Replica]
	now := costEpoch.Add(2 * time.Second)
	queueOn(pr, 2*priorPrefillRate, now) // 2 s queued: stay
	if p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_600), Now: now}); p.Replica != a.Replica {
		t.Fatalf("moved with 2 s queued; want stay")
	}
	m.Done(a, now.Add(time.Second))
	now = now.Add(2 * time.Second)
	queueOn(pr, 30*priorPrefillRate, now) // 30 s queued: leave
	if p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(12_200), Now: now}); p.Replica == a.Replica {
		t.Fatalf("stayed with 30 s queued; want a move")
	}
}

// BenchmarkPlaceCost100kSessions is BenchmarkPlaceSticky100kSessions for
// policy cost: one Place plus its Done of a known session among 100k, with
// the cost model's per-session state beside the session table (B/session).
func BenchmarkPlaceCost100kSessions(b *testing.B) {
	benchPlace100k(b, config.PolicyCost, costEpoch)
}

func TestCostLearnsKVCapacityFromUsageWithoutCacheConfigInfo(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.Policy = config.PolicyCost })
	now := costEpoch
	for i := range m.Replicas() {
		m.ObserveReplica(i, ReplicaMetrics{Healthy: true}, now)
	}
	p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(20_000), Now: now})
	for range 50 { // 20k tokens in flight fill half of a 40k cache
		now = now.Add(250 * time.Millisecond)
		m.ObserveReplica(p.Replica, ReplicaMetrics{Healthy: true, Running: 1, KVUsage: 0.5}, now)
	}
	if got := m.capacity(p.Replica); math.Abs(got-40_000) > 1000 {
		t.Fatalf("learned capacity %.0f tokens, want about 40000", got)
	}
}

func TestAdmitIsPlaceForOtherPoliciesAndModes(t *testing.T) {
	for _, tc := range []struct {
		policy config.Policy
		mode   config.AdmissionMode
	}{{config.PolicyCacheAware, config.AdmissionQueue}, {config.PolicyStickyUntilSaturated, config.AdmissionQueue}, {config.PolicySticky, config.AdmissionSpill}, {config.PolicySticky, config.AdmissionOff}, {config.PolicyCost, config.AdmissionSpill}, {config.PolicyCost, config.AdmissionOff}} {
		m := mustCostModel(t, tc.policy, 20_000)
		if err := m.SetAdmission(config.AdmissionConfig{Mode: tc.mode}); err != nil {
			t.Fatal(err)
		}
		for k := range 12 { // three times what fits: nothing may park
			p, w, err := m.Admit(Request{SessionID: fmt.Sprint("s", k), PromptBytes: promptBytes(11_000), Now: costEpoch})
			if err != nil || w != nil || p.Replica < 0 {
				t.Fatalf("%s/%s session %d: replica %d parked=%v err=%v, want placed", tc.policy, tc.mode, k, p.Replica, w != nil, err)
			}
		}
	}
}

func TestCostBacklogEndsWithTheRequestsInFlight(t *testing.T) {
	// A drain rate learned far too low must not keep work queued that has
	// finished: once the request is done, its replica has nothing queued.
	m := mustCostModel(t, config.PolicyCost, 40_000)
	p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(12_000), Now: costEpoch})
	pr := &m.peer.reps[p.Replica]
	m.peer.rate = 1 // tokens/s
	if pr.backlog < 11_000 {
		t.Fatalf("backlog %.0f after a cold 12k prompt, want about 12000", pr.backlog)
	}
	m.Done(p, costEpoch.Add(3*time.Second))
	pr.drain(costEpoch.Add(3*time.Second).UnixNano(), m.prefillRate(p.Replica))
	if pr.backlog != 0 {
		t.Fatalf("backlog %.0f tokens with nothing in flight, want 0", pr.backlog)
	}
}

func TestCostPlacesWhatFitsNowhereOnTheLeastFullReplica(t *testing.T) {
	// 20k-token caches, 11k sessions: after the first four none fits
	// anywhere. The least full replica gets the next session even when its
	// predicted TTFT is the worst: TTFT alone would crowd the replica whose
	// sessions hit their cache now.
	m := mustCostModel(t, config.PolicyCost, 20_000)
	count := make([]int, m.Replicas())
	for k := range 7 {
		count[mustPlace(t, m, Request{SessionID: fmt.Sprint("s", k), PromptBytes: promptBytes(11_000), Now: costEpoch}).Replica]++
	}
	least := -1
	for i, c := range count {
		if c == 1 {
			least = i
		}
	}
	if least < 0 {
		t.Fatalf("7 sessions on 4 replicas split %v, want 2/2/2/1", count)
	}
	queueOn(&m.peer.reps[least], 200_000, costEpoch)
	if p := mustPlace(t, m, Request{SessionID: "new", PromptBytes: promptBytes(11_000), Now: costEpoch}); p.Replica != least {
		t.Fatalf("8th session went to replica %d (split %v), want %d, the least full", p.Replica, count, least)
	}
}

func TestCostMovesAnEvictedSessionOffACrowdedReplicaOnlyWhenItThrashes(t *testing.T) {
	for _, tc := range []struct {
		hits float64 // the crowded replica's prefix hits per 100 queried tokens
		move bool
	}{{10, true}, {80, false}} {
		m := mustCostModel(t, config.PolicyCost, 20_000)
		for i := 1; i < 4; i++ { // only replica 0 takes the first three sessions
			m.ObserveReplica(i, ReplicaMetrics{}, costEpoch)
		}
		var a Placement
		for k, id := range []string{"a", "b", "c"} {
			p := mustPlace(t, m, Request{SessionID: id, PromptBytes: promptBytes(11_000), Now: costEpoch})
			if k == 0 {
				a = p
			}
		}
		now := costEpoch.Add(time.Second)
		m.Done(a, now)
		m.peer.reps[0].touched += 22_000 // b and c ran since a's turn: a is evicted
		for i := range m.Replicas() {
			m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: 20_000}, now)
		}
		for _, id := range []string{"d", "e", "f"} { // one each on 1-3: no room left anywhere for a
			if p := mustPlace(t, m, Request{SessionID: id, PromptBytes: promptBytes(11_000), Now: now}); p.Replica == 0 {
				t.Fatalf("session %s joined the crowded replica", id)
			}
		}
		m.ObserveReplica(0, ReplicaMetrics{Healthy: true, KVCapacityTokens: 20_000,
			PrefixQueries: 100_000, PrefixHits: tc.hits * 1000}, now.Add(250*time.Millisecond))
		p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_400), Now: now.Add(500 * time.Millisecond)})
		if moved := p.Replica != 0; moved != tc.move {
			t.Fatalf("hit rate %.0f%% on the crowded replica: a went to replica %d, want move=%v", tc.hits, p.Replica, tc.move)
		}
	}
}

func TestCostMovesAnEvictedSessionToAShorterQueueOnlyAmongThrashingReplicas(t *testing.T) {
	// Replica 0 holds a, b, c (b and c still queued), replica 1 two smaller
	// sessions that are done; replicas 2 and 3 are down. Neither replica is
	// half a session emptier than the other, so only the shorter queue
	// speaks for a move, and only if replica 1 thrashes too: a session
	// that recomputes anyway must not evict a cache that still serves.
	for _, tc := range []struct {
		otherHits float64 // replica 1's prefix hits per 100 queried tokens
		move      bool
	}{{10, true}, {80, false}} {
		m := mustCostModel(t, config.PolicyCost, 20_000)
		up := func(on ...int) {
			for i := range m.Replicas() {
				m.ObserveReplica(i, ReplicaMetrics{Healthy: slices.Contains(on, i), KVCapacityTokens: 20_000}, costEpoch)
			}
		}
		up(0)
		var a Placement
		for k, id := range []string{"a", "b", "c"} {
			if p := mustPlace(t, m, Request{SessionID: id, PromptBytes: promptBytes(11_000), Now: costEpoch}); k == 0 {
				a = p
			}
		}
		up(1)
		for _, id := range []string{"d", "e"} {
			m.Done(mustPlace(t, m, Request{SessionID: id, PromptBytes: promptBytes(10_000), Now: costEpoch}), costEpoch.Add(time.Second))
		}
		up(0, 1)
		now := costEpoch.Add(time.Second)
		m.Done(a, now)
		m.peer.reps[0].touched += 22_000 // b and c since a's turn
		for i, hits := range []float64{10, tc.otherHits} {
			m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: 20_000, PrefixQueries: 100_000, PrefixHits: hits * 1000},
				now.Add(250*time.Millisecond))
		}
		p := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(11_400), Now: now.Add(500 * time.Millisecond)})
		if moved := p.Replica == 1; moved != tc.move {
			t.Fatalf("replica 1 at %.0f%% hits: a went to replica %d, want move=%v", tc.otherHits, p.Replica, tc.move)
		}
	}
}
