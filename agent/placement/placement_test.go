package placement

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// epoch is the virtual clock's start (notes/api.md).
var epoch = time.Unix(1_700_000_000, 0).UTC()

func mustModel(tb testing.TB, mutate func(*config.ModelConfig)) *Model {
	tb.Helper()
	mc := config.DefaultModel("m")
	mc.Frontend = "127.0.0.1:8000"
	for i := range 4 {
		mc.Replicas = append(mc.Replicas, fmt.Sprintf("http://127.0.0.1:%d", 9001+i))
	}
	if mutate != nil {
		mutate(&mc)
	}
	key := make([]byte, 16)
	h := NewSessionHasher(key)
	m, err := NewModel(mc, ModelOptions{Hasher: &h, Seed: 1})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func mustPlace(tb testing.TB, m *Model, r Request) Placement {
	tb.Helper()
	p, err := m.Place(r)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestSixTurnsOfOneSessionStayOnOneReplica(t *testing.T) {
	m := mustModel(t, nil)
	now := epoch
	var first Placement
	for turn := range 6 {
		p := mustPlace(t, m, Request{SessionID: "s1", Now: now})
		if turn == 0 {
			first = p
			if p.Kind != KindNew {
				t.Fatalf("turn 0 kind %v", p.Kind)
			}
		} else if p.Replica != first.Replica || p.Kind != KindSticky {
			t.Fatalf("turn %d: replica %d kind %v, want %d sticky", turn, p.Replica, p.Kind, first.Replica)
		}
		now = now.Add(2 * time.Second)
		m.Done(p, now)
	}
	st := m.Status()
	if st.StickyShare != 1 || st.Sessions != 1 || st.InFlight != 0 || st.Replicas[first.Replica].Sticky != 5 {
		t.Errorf("status: share %v sessions %d in flight %d sticky %d", st.StickyShare, st.Sessions, st.InFlight, st.Replicas[first.Replica].Sticky)
	}
}

func TestFourNewSessionsSpreadOverFourIdleReplicas(t *testing.T) {
	for _, concurrent := range []bool{true, false} {
		m := mustModel(t, nil)
		seen := map[int]bool{}
		for i := range 4 {
			p := mustPlace(t, m, Request{SessionID: fmt.Sprint("s", i), Now: epoch})
			seen[p.Replica] = true
			if !concurrent {
				m.Done(p, epoch)
			}
		}
		if len(seen) != 4 {
			t.Errorf("concurrent=%v: sessions landed on %v", concurrent, seen)
		}
	}
}

func TestSpillMovesRequestAtThresholdAndKeepsThePin(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.SpillThreshold = config.SpillThreshold{N: 2} })
	a := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	b := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if b.Replica != a.Replica || b.Kind != KindSticky {
		t.Fatalf("second request: %+v", b)
	}
	c := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if c.Replica == a.Replica || c.Kind != KindSpilled {
		t.Fatalf("third request should spill: %+v (pinned %d)", c, a.Replica)
	}
	m.Done(a, epoch)
	d := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if d.Replica != a.Replica || d.Kind != KindSticky {
		t.Fatalf("after one ended the session is back on its pin: %+v", d)
	}
	st := m.Status()
	if st.Replicas[c.Replica].SpilledIn != 1 || st.Moved != 1 || st.Stayed != 2 || st.Replicas[a.Replica].Sessions != 1 {
		t.Errorf("counters: %+v", st)
	}
}

func TestClientPinnedHeaderIsHonouredAndInvalidOneCounted(t *testing.T) {
	m := mustModel(t, nil)
	p := mustPlace(t, m, Request{SessionID: "s", PinnedHeader: "2", Now: epoch})
	if p.Replica != 2 || p.Kind != KindClientPinned {
		t.Fatalf("pinned: %+v", p)
	}
	p = mustPlace(t, m, Request{PinnedHeader: "http://127.0.0.1:9004", Now: epoch})
	if p.Replica != 3 || p.Kind != KindClientPinned {
		t.Fatalf("pinned by URL: %+v", p)
	}
	for _, bad := range []string{"7", "-1", "rank-two"} {
		p = mustPlace(t, m, Request{SessionID: "other", PinnedHeader: bad, Now: epoch})
		if p.Kind == KindClientPinned {
			t.Errorf("invalid pin %q honoured: %+v", bad, p)
		}
	}
	st := m.Status()
	if st.InvalidPins != 3 || st.Replicas[2].ClientPinned != 1 || st.Replicas[3].ClientPinned != 1 {
		t.Errorf("counters: invalid %d, client pinned %d %d", st.InvalidPins, st.Replicas[2].ClientPinned, st.Replicas[3].ClientPinned)
	}
}

func TestAffinityOffUsesVLLMLBAndNoRankHeaderInOneEndpointShape(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) {
		mc.Replicas = nil
		mc.Endpoint = "http://127.0.0.1:9000"
		mc.Ranks = 4
	})
	p := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if p.RankHeader != p.Replica || p.Addr != "127.0.0.1:9000" {
		t.Fatalf("affinity on, one endpoint: %+v", p)
	}
	m.SetAffinity(false)
	q := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if q.RankHeader != -1 || q.Replica != -1 || q.Kind != KindBalanced || q.Addr != "127.0.0.1:9000" {
		t.Fatalf("affinity off, one endpoint: %+v", q)
	}
	m.Done(q, epoch)
	m.Done(p, epoch)
	if st := m.Status(); st.InFlight != 0 || st.Effective != "vllm" {
		t.Errorf("status: %+v", st)
	}

	r := mustModel(t, nil)
	r.SetAffinity(false)
	seen := map[int]int{}
	for i := range 8 {
		p := mustPlace(t, r, Request{SessionID: "one", Now: epoch.Add(time.Duration(i) * time.Millisecond)})
		if p.Kind != KindBalanced || p.RankHeader != -1 {
			t.Fatalf("affinity off, per replica: %+v", p)
		}
		seen[p.Replica]++
	}
	// vLLM's balancer ignores the session: with no stats it spreads by its local bumps.
	if len(seen) != 4 {
		t.Errorf("vllm-lb should spread one session's turns over all replicas: %v", seen)
	}
	if st := r.Status(); st.Effective != string(config.PolicyVLLMLB) {
		t.Errorf("effective policy %q", st.Effective)
	}
}

func TestUnhealthyReplicaGetsNoWorkAndItsSessionsMove(t *testing.T) {
	m := mustModel(t, nil)
	p := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	m.Done(p, epoch)
	m.SetHealthy(p.Replica, false)
	for i := range 8 {
		q := mustPlace(t, m, Request{SessionID: fmt.Sprint("n", i), Now: epoch})
		if q.Replica == p.Replica {
			t.Fatalf("unhealthy replica %d got a new session", p.Replica)
		}
	}
	q := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if q.Replica == p.Replica || q.Kind != KindRepinned {
		t.Fatalf("session on an unhealthy replica: %+v", q)
	}
	r := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if r.Replica != q.Replica || r.Kind != KindSticky {
		t.Fatalf("repinned session should stay: %+v", r)
	}
	for i := range 4 {
		m.SetHealthy(i, false)
	}
	if _, err := m.Place(Request{SessionID: "s", Now: epoch}); !errors.Is(err, ErrNoHealthyReplica) {
		t.Fatalf("all unhealthy: %v", err)
	}
}

func TestIdleSessionsExpireAfterTTL(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.SessionTTL = time.Minute })
	p := mustPlace(t, m, Request{SessionID: "old", Now: epoch})
	m.Done(p, epoch)
	for i := range 10 {
		q := mustPlace(t, m, Request{SessionID: fmt.Sprint("s", i), Now: epoch})
		m.Done(q, epoch)
	}
	later := epoch.Add(61 * time.Second)
	if n := m.ExpireIdle(later, 0); n != 11 || m.LiveSessions() != 0 {
		t.Fatalf("expired %d, live %d", n, m.LiveSessions())
	}
	if q := mustPlace(t, m, Request{SessionID: "old", Now: later}); q.Kind != KindNew {
		t.Errorf("expired session placed as %v", q.Kind)
	}
	// Expiry on lookup: an idle session is new again even before a sweep.
	if q := mustPlace(t, m, Request{SessionID: "old", Now: later.Add(2 * time.Minute)}); q.Kind != KindNew {
		t.Errorf("idle session placed as %v", q.Kind)
	}
	if st := m.Status(); st.SessionsExpired != 12 {
		t.Errorf("sessions_expired %d", st.SessionsExpired)
	}
}

func TestRequestWithoutSessionIsUnaffined(t *testing.T) {
	m := mustModel(t, nil)
	p := mustPlace(t, m, Request{Now: epoch})
	if p.Kind != KindUnaffined || p.SessionHash != 0 || m.LiveSessions() != 0 {
		t.Fatalf("%+v", p)
	}
	if st := m.Status(); st.Unaffined != 1 {
		t.Errorf("unaffined %d", st.Unaffined)
	}
}

func TestRetryMovesOnceToNextBestReplica(t *testing.T) {
	m := mustModel(t, nil)
	p := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	q, err := m.Retry(p, epoch)
	if err != nil || q.Replica == p.Replica {
		t.Fatalf("retry: %+v %v", q, err)
	}
	if _, err := m.Retry(q, epoch); !errors.Is(err, ErrRetryExhausted) {
		t.Fatalf("second retry: %v", err)
	}
	if st := m.Status(); st.InFlight != 0 {
		t.Errorf("in flight %d after a failed retry", st.InFlight)
	}
	r := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	if r.Replica != q.Replica {
		t.Errorf("session should follow the retry to %d, went to %d", q.Replica, r.Replica)
	}
}

func TestHashPolicyIsConsistentAndSkipsUnhealthy(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.Policy = config.PolicyHash })
	where := map[string]int{}
	counts := map[int]int{}
	for i := range 400 {
		id := fmt.Sprint("s", i)
		p := mustPlace(t, m, Request{SessionID: id, Now: epoch})
		where[id] = p.Replica
		counts[p.Replica]++
		m.Done(p, epoch)
	}
	for r, n := range counts {
		if n < 50 {
			t.Errorf("replica %d got only %d of 400 sessions", r, n)
		}
	}
	m.SetHealthy(1, false)
	for id, r := range where {
		p := mustPlace(t, m, Request{SessionID: id, Now: epoch})
		if r != 1 && p.Replica != r {
			t.Errorf("%s moved from healthy %d to %d", id, r, p.Replica)
		}
		if p.Replica == 1 {
			t.Errorf("%s sent to unhealthy replica", id)
		}
	}
}

func TestEveryPolicyPlacesOnlyOnHealthyReplicas(t *testing.T) {
	for _, pol := range config.Policies() {
		m := mustModel(t, func(mc *config.ModelConfig) { mc.Policy = pol })
		m.SetHealthy(0, false)
		for i := range 20 {
			p := mustPlace(t, m, Request{SessionID: fmt.Sprint(i % 5), Now: epoch.Add(time.Duration(i) * time.Second)})
			if p.Replica == 0 || p.Replica < 0 {
				t.Errorf("%s: placed on %d", pol, p.Replica)
			}
			m.Done(p, epoch)
		}
	}
}

// recordingSink keeps what a kernel mirror would hold.
type recordingSink struct {
	entries map[uint64]int
	deletes int
}

func (s *recordingSink) Upsert(h uint64, replica int, _ uint64, _ uint8) { s.entries[h] = replica }
func (s *recordingSink) Delete(h uint64)                                 { delete(s.entries, h); s.deletes++ }

func TestSessionSinkMirrorsPinsRepinsAndExpiry(t *testing.T) {
	sink := &recordingSink{entries: map[uint64]int{}}
	mc := config.DefaultModel("m")
	mc.Frontend = "127.0.0.1:8000"
	mc.Replicas = []string{"http://127.0.0.1:9001", "http://127.0.0.1:9002"}
	mc.SessionTTL = time.Minute
	m, err := NewModel(mc, ModelOptions{Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlace(t, m, Request{SessionID: "a", Now: epoch})
	m.Done(p, epoch)
	if got, ok := sink.entries[p.SessionHash]; !ok || got != p.Replica {
		t.Fatalf("sink after pin: %v", sink.entries)
	}
	m.SetHealthy(p.Replica, false)
	q := mustPlace(t, m, Request{SessionID: "a", Now: epoch})
	m.Done(q, epoch)
	if sink.entries[p.SessionHash] != q.Replica || q.Replica == p.Replica {
		t.Fatalf("sink after repin: %v", sink.entries)
	}
	m.ExpireIdle(epoch.Add(2*time.Minute), 0)
	if len(sink.entries) != 0 || sink.deletes != 1 {
		t.Fatalf("sink after expiry: %v, %d deletes", sink.entries, sink.deletes)
	}
}

func TestAutoSpillThresholdFollowsWhatTheReplicaCanBatch(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.SpillThreshold = config.SpillThreshold{Auto: true} })
	if st := m.Status(); st.Spill != config.DefaultSpillThreshold || !st.SpillAuto {
		t.Fatalf("before any signal: %d", st.Spill)
	}
	// KV capacity over mean prompt size: 120,000 tokens / 10,000 tokens.
	for i := range 4 {
		m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: 120_000}, epoch)
	}
	p := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 40_000, Now: epoch})
	if got := m.Status().Replicas[p.Replica].SpillThreshold; got != 12 {
		t.Fatalf("from KV capacity: %d, want 12", got)
	}
	// Saturation seen: 14 running while others wait; the larger estimate wins.
	m.ObserveReplica(p.Replica, ReplicaMetrics{Healthy: true, Running: 14, Waiting: 2, KVCapacityTokens: 120_000}, epoch)
	if got := m.Status().Replicas[p.Replica].SpillThreshold; got != 14 {
		t.Fatalf("from saturation: %d, want 14", got)
	}
	// One snapshot of a single long prefill with another request waiting
	// must not drop the threshold to 1 (that spilled every turn).
	m.ObserveReplica(p.Replica, ReplicaMetrics{Healthy: true, Running: 1, Waiting: 1, KVCapacityTokens: 120_000}, epoch)
	if got := m.Status().Replicas[p.Replica].SpillThreshold; got != 14 {
		t.Fatalf("after a one-prefill snapshot: %d, want 14", got)
	}
	for range 13 {
		mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	}
	if q := mustPlace(t, m, Request{SessionID: "s", Now: epoch}); q.Kind != KindSpilled {
		t.Fatalf("fifteenth request with 14 in flight: %v, want spilled", q.Kind)
	}
}

func TestAutoSpillThresholdHasAFloor(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.SpillThreshold = config.SpillThreshold{Auto: true} })
	// A cache that holds less than one usual prompt: the floor, the
	// fixed threshold of before (a smaller one spilled sessions whose
	// cache the replica still held).
	for i := range 4 {
		m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: 8_000}, epoch)
	}
	p := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 48_000, Now: epoch})
	if got := m.Status().Replicas[p.Replica].SpillThreshold; got != minAutoSpill {
		t.Fatalf("tiny cache: %d, want the floor %d", got, minAutoSpill)
	}
}

func TestQuietSessionsStopAddingLoadButKeepTheirPin(t *testing.T) {
	m := mustModel(t, nil)
	p := mustPlace(t, m, Request{SessionID: "quiet", Now: epoch})
	m.Done(p, epoch)
	if st := m.Status(); st.Replicas[p.Replica].ActiveSessions != 1 {
		t.Fatalf("active %d", st.Replicas[p.Replica].ActiveSessions)
	}
	later := epoch.Add(ActiveWindow + time.Second)
	m.ExpireIdle(later, 0)
	st := m.Status()
	if st.Replicas[p.Replica].ActiveSessions != 0 || st.Replicas[p.Replica].Sessions != 1 || st.Replicas[p.Replica].Load != 0 {
		t.Fatalf("after a quiet minute: %+v", st.Replicas[p.Replica])
	}
	q := mustPlace(t, m, Request{SessionID: "quiet", Now: later})
	if q.Replica != p.Replica || q.Kind != KindSticky {
		t.Fatalf("quiet session lost its pin: %+v", q)
	}
	if st := m.Status(); st.Replicas[p.Replica].ActiveSessions != 1 {
		t.Errorf("active again: %d", st.Replicas[p.Replica].ActiveSessions)
	}
}

func TestConcurrentPlaceAndDoneLeaveNothingInFlight(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.SpillThreshold = config.SpillThreshold{N: 2} })
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				now := epoch.Add(time.Duration(i) * time.Millisecond)
				p, err := m.Place(Request{SessionID: fmt.Sprint("s", (g*7+i)%40), Now: now})
				if err != nil {
					t.Error(err)
					return
				}
				if i%10 == 0 {
					if q, err := m.Retry(p, now); err == nil {
						p = q
					} else {
						continue // released by Retry
					}
				}
				m.Done(p, now)
			}
		}()
	}
	for range 8 {
		<-done
	}
	st := m.Status()
	if st.InFlight != 0 {
		t.Errorf("model in flight %d", st.InFlight)
	}
	total := uint64(0)
	for _, r := range st.Replicas {
		if r.InFlight != 0 {
			t.Errorf("replica %d in flight %d", r.Index, r.InFlight)
		}
		total += uint64(r.Sessions)
	}
	if int(total) != st.Sessions || st.Sessions != 40 {
		t.Errorf("sessions %d, pinned sum %d", st.Sessions, total)
	}
}
