package placement

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// Policy sticky under cache-capacity admission (policy_sticky_admission.go).

// stickyAdmissionModel is policy sticky on n replicas of capTokens each,
// with admission c.
func stickyAdmissionModel(t *testing.T, n int, capTokens float64, c config.AdmissionConfig) *Model {
	t.Helper()
	m := mustModel(t, func(mc *config.ModelConfig) {
		mc.Policy = config.PolicySticky
		mc.Replicas = mc.Replicas[:n]
	})
	for i := range n {
		m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: capTokens}, epoch)
	}
	if err := m.SetAdmission(c); err != nil {
		t.Fatal(err)
	}
	return m
}

// pinOn places a request without a session on replica i (a client pin):
// it counts in i's load and in nobody's context.
func pinOn(t *testing.T, m *Model, i int, now time.Time) Placement {
	t.Helper()
	return mustPlace(t, m, Request{PinnedHeader: strconv.Itoa(i), PromptBytes: promptBytes(100), Now: now})
}

func TestStickyParksWhenTheLiveContextsExceedTheCachesAndReleasesWhenRoomFrees(t *testing.T) {
	// Two replicas of 20k, mode auto (the default): five conversations of
	// 10k in flight are a live load of 1.25. Once its average passes 1.2 a
	// sixth waits at the warden; when two on one replica end, it gets their
	// room and sticky places it there, although the other replica has
	// fewer requests in flight; once the load is back under 1.0 nobody
	// waits.
	m := stickyAdmissionModel(t, 2, 20_000, config.AdmissionConfig{Mode: config.AdmissionAuto, Timeout: time.Minute})
	now := epoch
	poll := func(d time.Duration) { pollEvery(m, 20_000, &now, d) }
	on := map[int][]Placement{}
	for k := range 5 {
		p, w := admit(t, m, fmt.Sprint("s", k), 10_000-outputAllowance, now)
		if w != nil {
			t.Fatalf("conversation %d waited before admission engaged", k)
		}
		on[p.Replica] = append(on[p.Replica], p)
	}
	full := 0 // the replica with three conversations
	if len(on[1]) == 3 {
		full = 1
	}
	if len(on[full]) != 3 {
		t.Fatalf("sticky placed %d and %d conversations, want 3 and 2 (by load)", len(on[0]), len(on[1]))
	}
	poll(4 * time.Minute)
	st := m.AdmissionStats()
	if !st.Engaged || st.LiveLoad < 1.2 {
		t.Fatalf("engaged %v, live load %.2f with 50k live on 40k of cache: want engaged above 1.2", st.Engaged, st.LiveLoad)
	}
	_, w := admit(t, m, "late", 10_000-outputAllowance, now)
	if w == nil {
		t.Fatal("engaged, yet a conversation with no room anywhere did not wait")
	}
	// Two of the full replica's conversations end: room for one there.
	m.Done(on[full][0], now)
	now = endSession(m, on[full][1], now)
	if !granted(w) {
		t.Fatal("room freed, yet the waiter was not let in")
	}
	for range 3 { // the full replica is now the busier one by requests
		pinOn(t, m, full, now)
	}
	p, err := m.Claim(w, now)
	if err != nil || p.Replica != full || p.Kind != KindNew {
		t.Fatalf("claimed: replica %d kind %v err %v, want replica %d (where its room is), new", p.Replica, p.Kind, err, full)
	}
	if got := m.AdmissionStats().Parked; got != 0 {
		t.Fatalf("%d still parked", got)
	}
	// Everything ends: the load falls under 1.0 and admission lets go.
	m.Done(p, now)
	for _, p := range append(on[full][2:], on[1-full]...) {
		m.Done(p, now)
	}
	poll(4 * time.Minute)
	if st := m.AdmissionStats(); st.Engaged || st.Switches != 1 {
		t.Fatalf("engaged %v after %d switches with nothing live, want off after one (load %.2f)", st.Engaged, st.Switches, st.LiveLoad)
	}
	if _, w := admit(t, m, "after", 10_000, now); w != nil {
		t.Fatal("a conversation waited with admission off")
	}
}

func TestStickyStartsAConversationWhereItsRoomIsWhileAdmissionIsEngaged(t *testing.T) {
	// Mode queue (always engaged), two replicas of 20k: replica a holds a
	// 15k conversation, replica b a 3k one and three pinned requests. By
	// load a new 8k conversation would go to a (one request in flight
	// against four); it fits only on b, so it goes there without waiting.
	// The same with admission off goes to a.
	for _, mode := range []config.AdmissionMode{config.AdmissionQueue, config.AdmissionOff} {
		m := stickyAdmissionModel(t, 2, 20_000, config.AdmissionConfig{Mode: mode, Timeout: time.Minute})
		big, _ := admit(t, m, "big", 15_000, epoch)
		a, b := big.Replica, 1-big.Replica
		small, w := admit(t, m, "small", 3_000, epoch)
		if w != nil || small.Replica != b {
			t.Fatalf("%s: small on %d (parked %v), want %d", mode, small.Replica, w != nil, b)
		}
		for range 3 {
			pinOn(t, m, b, epoch)
		}
		p, w := admit(t, m, "new", 8_000, epoch.Add(time.Second))
		want := b
		if mode == config.AdmissionOff {
			want = a
		}
		if w != nil || p.Replica != want {
			t.Fatalf("%s: new conversation on %d (parked %v), want %d", mode, p.Replica, w != nil, want)
		}
	}
}

func TestStickyNeverParksOrMovesAConversationAtLowLoad(t *testing.T) {
	// Mode auto on two replicas of 40k: conversations come and go, at most
	// three of 8-14k live at once (under 0.9 of the caches, growing each
	// turn). Nothing waits, and every request goes where it goes with
	// admission off.
	var got [2][]int
	for k, mode := range []config.AdmissionMode{config.AdmissionAuto, config.AdmissionOff} {
		m := stickyAdmissionModel(t, 2, 40_000, config.AdmissionConfig{Mode: mode, Timeout: time.Minute})
		now := epoch
		for c := range 12 {
			for turn := range 6 {
				for j := range 3 {
					id := fmt.Sprint("c", c, "-", j)
					p, w := admit(t, m, id, 8_000+1_000*turn, now)
					if w != nil {
						t.Fatalf("%s: %s turn %d waited at a low load", mode, id, turn)
					}
					got[k] = append(got[k], p.Replica)
					now = now.Add(2 * time.Second)
					m.Done(p, now)
				}
				for i := range 2 {
					m.ObserveReplica(i, ReplicaMetrics{Healthy: true, KVCapacityTokens: 40_000}, now)
				}
			}
		}
		if st := m.AdmissionStats(); st.Engaged || st.Waits != 0 {
			t.Fatalf("%s: engaged %v, %d waits at a low load (load %.2f)", mode, st.Engaged, st.Waits, st.LiveLoad)
		}
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
		t.Fatalf("placements differ with admission auto and off:\n%v\n%v", got[0], got[1])
	}
}
