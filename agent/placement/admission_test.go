package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// The rules of cache-capacity admission (admission.go, admission_queue.go,
// admission_auto.go), each on a small model driven on virtual time.

// mustAdmissionModel is a cost model of n replicas of capTokens each, with
// admission c; the shared prefix is taken as known (0 unless set).
func mustAdmissionModel(tb testing.TB, n int, capTokens float64, c config.AdmissionConfig) *Model {
	tb.Helper()
	m := mustModel(tb, func(mc *config.ModelConfig) {
		mc.Policy = config.PolicyCost
		mc.Replicas = mc.Replicas[:n]
	})
	for i := range n {
		m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: capTokens}, epoch)
	}
	if err := m.SetAdmission(c); err != nil {
		tb.Fatal(err)
	}
	return m
}

// admit is Admit with a prompt of the given tokens at now.
func admit(tb testing.TB, m *Model, id string, tokens int, now time.Time) (Placement, *Wait) {
	tb.Helper()
	p, w, err := m.Admit(Request{SessionID: id, PromptBytes: promptBytes(tokens), Now: now})
	if err != nil {
		tb.Fatalf("%s: %v", id, err)
	}
	return p, w
}

func granted(w *Wait) bool {
	select {
	case <-w.Ready:
		return true
	default:
		return false
	}
}

// endSession ends session id's last turn (placement p) at now and lets
// its liveness lapse: the room is free at the next poll.
func endSession(m *Model, p Placement, now time.Time) time.Time {
	m.Done(p, now)
	later := now.Add(time.Duration(m.liveIdle()) + time.Second)
	for i := range m.Replicas() {
		m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: m.capacity(i)}, later)
	}
	return later
}

var queue = config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: time.Minute}

func TestAdmissionGrantsInArrivalOrder(t *testing.T) {
	// One replica, room for one 10k session at a time: a, then b, c, d
	// wait, and each end lets in exactly the next in arrival order.
	m := mustAdmissionModel(t, 1, 12_000, queue)
	now := epoch
	p, _ := admit(t, m, "a", 10_000, now)
	var waits []*Wait
	for k, id := range []string{"b", "c", "d"} {
		_, w := admit(t, m, id, 10_000, now.Add(time.Duration(k+1)*time.Second))
		if w == nil {
			t.Fatalf("%s placed with no room", id)
		}
		waits = append(waits, w)
	}
	now = now.Add(5 * time.Second)
	for k, w := range waits {
		now = endSession(m, p, now)
		for j, x := range waits {
			if want := j <= k; granted(x) != want {
				t.Fatalf("after %d ends: waiter %d granted=%v, want %v (first come first served)", k+1, j, granted(x), want)
			}
		}
		var err error
		if p, err = m.Claim(w, now); err != nil || p.Replica != 0 {
			t.Fatalf("claim %d: %+v %v", k, p, err)
		}
	}
}

func TestAdmissionLetsASmallSessionPassABigOneUntilTheBigOneHasAged(t *testing.T) {
	// 30k of room: a 20k session holds it. A 25k one waits (it fits only
	// once a leaves); a 5k one arriving a second later fits now and may pass
	// it while it is young. Past a quarter of the timeout it has aged: a
	// later 5k one waits behind it even though it would fit.
	m := mustAdmissionModel(t, 1, 30_000, queue)
	a, _ := admit(t, m, "a", 20_000, epoch)
	_, big := admit(t, m, "big", 25_000, epoch)
	if big == nil {
		t.Fatal("the 25k session was placed with 10k of room")
	}
	if _, w := admit(t, m, "small", 4_000, epoch.Add(time.Second)); w != nil {
		t.Fatal("a 4k session that fits waited behind a young waiter that does not")
	}
	aged := epoch.Add(16 * time.Second) // past 0.25 × 60 s
	_, late := admit(t, m, "late", 4_000, aged)
	if late == nil {
		t.Fatal("a session passed a waiter that has aged")
	}
	endSession(m, a, aged)
	if !granted(big) || granted(late) {
		t.Fatalf("after a ends: big granted=%v late granted=%v, want the aged big one first", granted(big), granted(late))
	}
	m.Cancel(late)
}

func TestAdmissionQueuesASessionThatWaitedBeforeAheadOfNewOnes(t *testing.T) {
	// A session that already waited 40 s for its first turn and lost its
	// room counts as if it had come 40 s sooner: it goes before a new
	// session that arrived 10 s before it.
	m := mustAdmissionModel(t, 1, 12_000, queue)
	now := epoch
	p, _ := admit(t, m, "holder", 10_000, now)
	h := m.HashSession("old")
	m.mu.Lock()
	m.peer.sessions[h] = &peerSession{replica: 0, hold: -1, ctx: 8_000, waited: 40, lastEnd: now.UnixNano()}
	m.mu.Unlock()
	_, fresh := admit(t, m, "fresh", 8_000, now.Add(time.Second))
	_, old := admit(t, m, "old", 8_000, now.Add(11*time.Second))
	if fresh == nil || old == nil {
		t.Fatal("placed with no room")
	}
	endSession(m, p, now.Add(12*time.Second))
	if !granted(old) || granted(fresh) {
		t.Fatalf("old granted=%v fresh granted=%v, want the session that waited before first", granted(old), granted(fresh))
	}
}

func TestAdmissionSessionYieldsItsRoomAfterItsQuantumWhileOthersWait(t *testing.T) {
	// Room for one 10k session. With the prefill rate at 1000 tokens/s a
	// re-prefill takes 10 s, so a quantum of 3 is 30 s: a's turns end at 10
	// and 20 s (it keeps its room), then at 40 s (it yields: b gets the room,
	// and a's next request waits).
	m := mustAdmissionModel(t, 1, 12_000, config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: 10 * time.Minute, Quantum: 3})
	m.mu.Lock()
	m.peer.rate = 1000
	m.mu.Unlock()
	p, _ := admit(t, m, "a", 10_000, epoch)
	_, b := admit(t, m, "b", 10_000, epoch.Add(time.Second))
	for _, end := range []time.Duration{10 * time.Second, 20 * time.Second} {
		m.Done(p, epoch.Add(end))
		if granted(b) {
			t.Fatalf("a yielded after %v, before its 30 s quantum", end)
		}
		var w *Wait
		if p, w = admit(t, m, "a", 10_000, epoch.Add(end+time.Second)); w != nil {
			t.Fatalf("a live session waited at %v", end)
		}
	}
	m.Done(p, epoch.Add(40*time.Second))
	if !granted(b) {
		t.Fatal("a kept its room after its quantum while b waited")
	}
	if _, w := admit(t, m, "a", 10_000, epoch.Add(41*time.Second)); w == nil {
		t.Fatal("a's next request after it yielded did not wait its turn")
	}
	if st := m.AdmissionStats(); st.Yields != 1 {
		t.Fatalf("yields %d, want 1", st.Yields)
	}
}

func TestAdmissionSessionKeepsItsRoomWhenNobodyWaitsOrTheRoomWouldNotHelp(t *testing.T) {
	m := mustAdmissionModel(t, 1, 12_000, config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: 10 * time.Minute, Quantum: 1})
	m.mu.Lock()
	m.peer.rate = 1000
	m.mu.Unlock()
	p, _ := admit(t, m, "a", 4_000, epoch)
	m.Done(p, epoch.Add(time.Minute)) // long past its quantum, nobody waits
	p, w := admit(t, m, "a", 4_000, epoch.Add(61*time.Second))
	if w != nil {
		t.Fatal("a session lost its room with nobody waiting")
	}
	// c runs beside a throughout; a 9k waiter would not fit even in the
	// cache less c (a waiter larger than the whole cache would not wait:
	// costmodel.go, oversize): a stays.
	c, _ := admit(t, m, "c", 4_500, epoch.Add(61*time.Second))
	_, big := admit(t, m, "big", 9_000, epoch.Add(62*time.Second))
	if big == nil {
		t.Fatal("the 9k request found room")
	}
	m.Done(p, epoch.Add(2*time.Minute))
	if st := m.AdmissionStats(); st.Yields != 0 || granted(big) {
		t.Fatalf("yields %d, big granted %v: a yielded room that lets nobody in", st.Yields, granted(big))
	}
	m.Cancel(big)
	m.Done(c, epoch.Add(2*time.Minute))
}

func TestAdmissionTimeoutGoesToTheLeastOverfullReplicaAndTakesNobodysRoom(t *testing.T) {
	// Two replicas of 22k: a and b (12k) one on each, c (8k) beside one
	// of them; x (12k) fits nowhere and waits. At its timeout it goes
	// where it costs least, the least overfull replica (the one c is not
	// on), and every live session keeps its room: none of their next
	// turns waits.
	m := mustAdmissionModel(t, 2, 22_000, queue)
	m.peer.gapMean = 10 // sessions pause 10 s between turns: live for 200 s
	held := map[string]Placement{}
	for id, tokens := range map[string]int{"a": 12_000, "b": 12_000} {
		p, w := admit(t, m, id, tokens, epoch)
		if w != nil {
			t.Fatalf("%s waited with room", id)
		}
		held[id] = p
	}
	if held["a"].Replica == held["b"].Replica {
		t.Fatalf("a and b on one replica: %+v", held)
	}
	p, w := admit(t, m, "c", 8_000, epoch)
	if w != nil {
		t.Fatal("c waited with room")
	}
	held["c"] = p
	alone := 1 - p.Replica
	for id := range held {
		m.Done(held[id], epoch.Add(2*time.Second))
	}
	_, x := admit(t, m, "x", 12_000, epoch.Add(6*time.Second))
	if x == nil {
		t.Fatal("x placed with no room")
	}
	p, err := m.Claim(x, x.Deadline)
	if err != nil || p.Replica != alone {
		t.Fatalf("x at its timeout: replica %d err %v, want the least overfull %d", p.Replica, err, alone)
	}
	st := m.AdmissionStats()
	if st.TimedOut != 1 || st.Evicted != 0 {
		t.Fatalf("stats %+v, want 1 timed out and none evicted", st)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, w := admit(t, m, id, 8_100, x.Deadline.Add(time.Second)); w != nil {
			t.Fatalf("%s lost its room to x", id)
		}
	}
}

func TestAdmissionNoRequestWaitsPastItsDeadline(t *testing.T) {
	m := mustAdmissionModel(t, 1, 12_000, config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: 45 * time.Second})
	admit(t, m, "a", 10_000, epoch)
	_, w := admit(t, m, "b", 10_000, epoch.Add(3*time.Second))
	if want := epoch.Add(48 * time.Second); !w.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v (arrival + timeout)", w.Deadline, want)
	}
	if _, err := m.Claim(w, w.Deadline); err != nil {
		t.Fatal(err)
	}
	if st := m.AdmissionStatsAt(w.Deadline); st.MaxWait != 45 || st.Parked != 0 {
		t.Fatalf("max wait %v parked %d, want 45 and 0", st.MaxWait, st.Parked)
	}
}

func TestAdmissionWaiterLeavingGivesItsPlaceToTheNextAtOnce(t *testing.T) {
	// b is granted a's room when a ends, then b's client leaves before it
	// claims: the room goes to c at once, without waiting for a poll.
	m := mustAdmissionModel(t, 1, 12_000, queue)
	a, _ := admit(t, m, "a", 10_000, epoch)
	_, b := admit(t, m, "b", 10_000, epoch.Add(time.Second))
	_, c := admit(t, m, "c", 10_000, epoch.Add(2*time.Second))
	now := endSession(m, a, epoch.Add(3*time.Second))
	if !granted(b) || granted(c) {
		t.Fatal("b not granted first")
	}
	m.Abandon(b, now)
	if !granted(c) {
		t.Fatal("b left, c not granted its room at once")
	}
	if st := m.AdmissionStatsAt(now); st.Parked != 0 {
		t.Fatalf("parked %d after both left the queue", st.Parked)
	}
	// One still waiting that leaves is out of the queue at once.
	_, d := admit(t, m, "d", 10_000, now)
	m.Abandon(d, now.Add(time.Second))
	if st := m.AdmissionStats(); st.Parked != 0 {
		t.Fatalf("parked %d after d left", st.Parked)
	}
}

func TestAdmissionRefusesPastQueueMaxWithTheOldestWaitersTimeLeft(t *testing.T) {
	m := mustAdmissionModel(t, 1, 12_000, config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: time.Minute, QueueMax: 2})
	admit(t, m, "a", 10_000, epoch)
	admit(t, m, "b", 10_000, epoch)
	admit(t, m, "c", 10_000, epoch.Add(10*time.Second))
	_, _, err := m.Admit(Request{SessionID: "d", PromptBytes: promptBytes(10_000), Now: epoch.Add(20 * time.Second)})
	var full *AdmissionFullError
	if !errors.As(err, &full) || !errors.Is(err, ErrAdmissionFull) {
		t.Fatalf("err %v, want an AdmissionFullError", err)
	}
	if full.RetryAfter != 40*time.Second {
		t.Fatalf("Retry-After %v, want 40s: b, waiting since 0 s, is placed at 60 s", full.RetryAfter)
	}
	if st := m.AdmissionStats(); st.Rejected != 1 || st.Parked != 2 {
		t.Fatalf("stats %+v, want 1 rejected and 2 parked", st)
	}
}

func TestAdmissionAutoEngagesAboveTheCacheAndLetsGoOnceItFits(t *testing.T) {
	// Mode auto on 2 replicas of 20k: the live load's one-minute average
	// must pass 1.2 before anybody waits, and admission stays on until it
	// is back under 1.0 (the hysteresis band).
	m := mustAdmissionModel(t, 2, 20_000, config.AdmissionConfig{Mode: config.AdmissionAuto, Timeout: time.Minute})
	now := epoch
	poll := func(d time.Duration) { pollEvery(m, 20_000, &now, d) }
	var ps []Placement
	for k := range 5 { // 5 × 10k in flight on 40k: a live load of 1.25; nobody waits yet
		p, w := admit(t, m, fmt.Sprint("s", k), 10_000-outputAllowance, now)
		if w != nil {
			t.Fatalf("session %d waited before admission engaged", k)
		}
		ps = append(ps, p)
	}
	poll(10 * time.Second)
	if m.AdmissionStats().Engaged {
		t.Fatal("engaged at once: the average must rise over a minute")
	}
	poll(4 * time.Minute)
	if !m.AdmissionStats().Engaged {
		t.Fatalf("not engaged at a live load of 1.25 for 4 minutes (average %.2f)", m.peer.admission.loadAvg)
	}
	if _, w := admit(t, m, "late", 10_000, now); w == nil {
		t.Fatal("engaged, yet a session with no room did not wait")
	} else {
		m.Abandon(w, now)
	}
	// One session ends: 4 × 10k on 40k is 1.0, inside the band: it stays on.
	m.Done(ps[4], now)
	poll(4 * time.Minute)
	if !m.AdmissionStats().Engaged {
		t.Fatalf("let go inside the hysteresis band (average %.2f)", m.peer.admission.loadAvg)
	}
	// Two more end: 0.5, under 1.0 with nobody waiting: off.
	m.Done(ps[3], now)
	m.Done(ps[2], now)
	poll(4 * time.Minute)
	if st := m.AdmissionStats(); st.Engaged || st.Switches != 1 {
		t.Fatalf("engaged %v switches %d at a live load of 0.5, want off after one switch (average %.2f)", st.Engaged, st.Switches, m.peer.admission.loadAvg)
	}
	if _, w := admit(t, m, "late", 10_000, now); w != nil {
		t.Fatal("a session waited with admission off")
	}
	m.Done(ps[0], now)
	m.Done(ps[1], now)
}

func TestAdmissionLikelyEndedSessionGivesItsRoomToAWaiter(t *testing.T) {
	// Sessions here mostly come back within 2 s of a turn's end, three in
	// ten after 40 s, and one turn end in three is a session's last; a
	// session quiet for 10 s has more likely ended than not, so a waiter
	// gets its room without waiting for liveIdle (past 40 s: most likely
	// ended).
	m := mustAdmissionModel(t, 1, 12_000, config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: 10 * time.Minute})
	now := epoch
	for k := range 60 { // teach the pauses: 2 turns with a pause, then the end
		id := fmt.Sprint("t", k)
		p, w := admit(t, m, id, 1_000, now)
		if w != nil {
			t.Fatal("a teaching session waited")
		}
		pause := time.Duration(1000+k%1000) * time.Millisecond
		if k%10 < 3 {
			pause = 40 * time.Second
		}
		for turn := range 3 {
			now = now.Add(time.Second)
			m.Done(p, now)
			if turn < 2 {
				now = now.Add(pause)
				p, _ = admit(t, m, id, 1_000, now)
			}
		}
		now = endSession(m, p, now)
	}
	if d := time.Duration(m.liveIdle()); d < 20*time.Second {
		t.Fatalf("liveIdle %v: the test needs it well past 10 s", d)
	}
	a, _ := admit(t, m, "a", 10_000, now)
	m.Done(a, now.Add(time.Second))
	_, b := admit(t, m, "b", 10_000, now.Add(11*time.Second))
	if b == nil {
		t.Fatal("b placed while a may still come back")
	}
	m.ObserveReplica(0, ReplicaMetrics{Healthy: true, KVCapacityTokens: 12_000}, now.Add(12*time.Second))
	if !granted(b) {
		t.Fatal("a, quiet for 11 s where sessions come back within 2 s, kept its room")
	}
	if st := m.AdmissionStats(); st.Released != 1 {
		t.Fatalf("released %d, want 1", st.Released)
	}
}

func TestAdmissionKeepsAReplicaWithinItsCacheAsLiveSessionsGrow(t *testing.T) {
	// Two live sessions fill a 30k replica; a's history grows by 8k (past
	// the 20% slack), so the other, idle, gives its room up.
	m := mustAdmissionModel(t, 1, 30_000, queue)
	a, _ := admit(t, m, "a", 14_000, epoch)
	b, _ := admit(t, m, "b", 14_000, epoch)
	m.Done(b, epoch.Add(time.Second))
	m.Done(a, epoch.Add(2*time.Second))
	if _, w := admit(t, m, "a", 22_000, epoch.Add(3*time.Second)); w != nil {
		t.Fatal("a live session waited")
	}
	if got := m.CostEstimates().Live[0]; got > 30_000 {
		t.Fatalf("live context %.0f on a 30k replica after a grew", got)
	}
	if _, w := admit(t, m, "b", 14_500, epoch.Add(4*time.Second)); w == nil {
		t.Fatal("b kept its room on an overfull replica")
	}
}

func TestAdmissionLearnsTheSharedPrefixFromKVUsage(t *testing.T) {
	// Three sessions of 12k whose first 3.5k tokens are the same system
	// prompt run on one replica: vLLM holds 3.5k + 3 × 8.5k = 29k.
	m := mustAdmissionModel(t, 1, 40_000, queue)
	now := epoch
	var ps []Placement
	for _, id := range []string{"a", "b", "c"} {
		p, _ := admit(t, m, id, 12_000, now)
		ps = append(ps, p)
	}
	var prompts, ttft, count float64
	for range 80 { // 20 s: samples count once the 36k of prefill placed is done (9 s at the prior rate, with a margin)
		now = now.Add(250 * time.Millisecond)
		prompts, ttft, count = prompts+1, ttft+0.5, count+1 // a mean TTFT of 0.5 s
		m.ObserveReplica(0, ReplicaMetrics{Healthy: true, KVCapacityTokens: 40_000, Running: 3, KVUsage: 29_000.0 / 40_000,
			PromptTokens: prompts, TTFTSum: ttft, TTFTCount: count}, now)
	}
	if got := m.CostEstimates().SharedPrefix; math.Abs(got-3_500) > 100 {
		t.Fatalf("shared prefix %.0f tokens, want about 3500", got)
	}
	if got := m.CostEstimates().Live[0]; math.Abs(got-(29_000+3*outputAllowance)) > 300 {
		t.Fatalf("live context %.0f, want the 29k the replica holds (+ reply allowances)", got)
	}
	for _, p := range ps {
		m.Done(p, now)
	}
}

func TestSwitchingAwayFromCostReleasesEveryWaiter(t *testing.T) {
	m := mustAdmissionModel(t, 1, 12_000, queue)
	admit(t, m, "a", 10_000, epoch)
	_, w := admit(t, m, "b", 10_000, epoch)
	if err := m.SetPolicy(config.PolicyCacheAware); err != nil {
		t.Fatal(err)
	}
	if !granted(w) || m.AdmissionStats().Parked != 0 {
		t.Fatal("a waiter stayed parked under a policy that does not admit")
	}
	if p, err := m.Claim(w, epoch.Add(time.Second)); err != nil || p.Replica != 0 {
		t.Fatalf("claim: %+v %v", p, err)
	}
}

func TestLiveIdleFollowsThePausesOfAgentsWithToolTime(t *testing.T) {
	// Agents: six turns, each later one after 0.1-20 s of tool time
	// (log-uniform, mean about 3.8 s). A session idle past the longest
	// pauses has ended; 20 mean pauses (75 s, the rule before the pauses
	// were learned) kept finished sessions live for most of a task.
	m := mustAdmissionModel(t, 1, 1e6, config.AdmissionConfig{Mode: config.AdmissionSpill})
	now := epoch
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range 100 {
		id := fmt.Sprint("s", k)
		p, _ := admit(t, m, id, 1_000, now)
		for turn := range 6 {
			now = now.Add(time.Second)
			m.Done(p, now)
			if turn < 5 {
				now = now.Add(time.Duration(100 * math.Pow(200, rng.Float64()) * float64(time.Millisecond)))
				p, _ = admit(t, m, id, 1_000, now)
			}
		}
	}
	d := time.Duration(m.liveIdle())
	if d < 15*time.Second || d > 35*time.Second {
		t.Fatalf("liveIdle %v, want past the longest pauses (20 s) and well under 20 mean pauses (%v)",
			d, time.Duration(m.peer.gapMean*liveIdleGaps*float64(time.Second)))
	}
}

func TestAdmissionSharedPrefixIgnoresUsageWhilePromptsPrefill(t *testing.T) {
	// Two 51k sessions share 3.5k; their prefills take about 25 s at the
	// prior rate, and vLLM allocates a prompt's blocks chunk by chunk, so
	// usage lags what the warden sent while they prefill. Samples taken
	// then (here 60k of the 98.5k they will hold, for 42 s) must not
	// count: they would say the sessions share 42k, and admission would
	// fit four sessions where two do (the 27B box at 26 sessions,
	// docs/placement.md).
	m := mustAdmissionModel(t, 1, 152_000, queue)
	now := epoch
	var ps []Placement
	for _, id := range []string{"a", "b"} {
		p, _ := admit(t, m, id, 51_000, now)
		ps = append(ps, p)
	}
	var ttft, count float64
	for k := range 180 { // 45 s, polls every 250 ms; cached turns elsewhere keep the mean TTFT at 2 s
		now = now.Add(250 * time.Millisecond)
		ttft, count = ttft+2, count+1
		usage := 60_000.0
		if k >= 168 {
			usage = 98_500
		}
		m.ObserveReplica(0, ReplicaMetrics{Healthy: true, KVCapacityTokens: 152_000, Running: 2, KVUsage: usage / 152_000,
			PromptTokens: 1, TTFTSum: ttft, TTFTCount: count}, now)
	}
	if got := m.CostEstimates().SharedPrefix; math.Abs(got-3_500) > 100 {
		t.Fatalf("shared prefix %.0f tokens, want about 3500", got)
	}
	for _, p := range ps {
		m.Done(p, now)
	}
}

// pollEvery observes every replica of m healthy with the given KV capacity
// once a second for d, from *now on, and moves *now on by d: the poller,
// as admission's one-minute average sees it.
func pollEvery(m *Model, capacity float64, now *time.Time, d time.Duration) {
	for end := now.Add(d); now.Before(end); *now = now.Add(time.Second) {
		for i := range m.reps {
			m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: capacity}, *now)
		}
	}
}
