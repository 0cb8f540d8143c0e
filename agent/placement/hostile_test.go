package placement

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// Clients that try to move everyone else's placement: pins from anywhere,
// bodies that never arrive, floods of fresh session ids.

func hostileModel(t *testing.T, edit func(*config.ModelConfig)) *Model {
	t.Helper()
	mc := config.DefaultModel("m")
	mc.Frontend = "127.0.0.1:18000"
	for i := range 4 {
		mc.Replicas = append(mc.Replicas, fmt.Sprintf("http://127.0.0.1:%d", 18101+i))
	}
	if edit != nil {
		edit(&mc)
	}
	m, err := NewModel(mc, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPinsAreHonouredFromPinSourcesOnly(t *testing.T) {
	m := hostileModel(t, func(mc *config.ModelConfig) { mc.PinSources = []string{"10.0.0.0/8", "127.0.0.2"} })
	now := time.Now()
	for _, tc := range []struct {
		src    string
		pinned bool
	}{
		{"10.9.8.7", true}, {"127.0.0.2", true}, {"::ffff:127.0.0.2", true},
		{"127.0.0.1", false}, {"192.168.1.1", false}, {"::1", false},
	} {
		p, err := m.Place(Request{PinnedHeader: "3", Source: netip.MustParseAddr(tc.src), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		m.Done(p, now)
		if got := p.Kind == KindClientPinned && p.Replica == 3; got != tc.pinned {
			t.Errorf("a pin from %s: kind %v replica %d; honoured %v, want %v", tc.src, p.Kind, p.Replica, got, tc.pinned)
		}
	}
	if st := m.Status(); st.UntrustedPins != 3 {
		t.Errorf("untrusted pins counted %d, want 3", st.UntrustedPins)
	}
	// By default nobody may pin.
	d := hostileModel(t, nil)
	if p, _ := d.Place(Request{PinnedHeader: "3", Source: netip.MustParseAddr("127.0.0.1"), Now: now}); p.Kind == KindClientPinned {
		t.Error("a pin was honoured with no pin_sources")
	}
}

// Requests whose bodies have not arrived count in flight but do not steer:
// ten of them on a session's replica make none of its turns spill.
func TestRequestsAwaitingTheirBodyDoNotSteer(t *testing.T) {
	m := hostileModel(t, func(mc *config.ModelConfig) { mc.PinSources = []string{"127.0.0.0/8"} })
	now := time.Now()
	first, _ := m.Place(Request{SessionID: "victim", Now: now})
	m.Done(first, now)
	home := first.Replica
	var held []Placement
	for range 10 {
		p, err := m.Place(Request{PinnedHeader: fmt.Sprint(home), BodyPending: true, PromptBytes: 100000, Source: netip.MustParseAddr("127.0.0.9"), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	st := m.Status()
	if r := st.Replicas[home]; r.InFlight != 10 || r.AwaitingBody != 10 || r.Load >= 1 {
		t.Fatalf("replica %d: in flight %d, awaiting %d, load %.2f; want 10 in flight, all awaiting, no load", home, r.InFlight, r.AwaitingBody, r.Load)
	}
	p, _ := m.Place(Request{SessionID: "victim", Now: now})
	if p.Kind != KindSticky || p.Replica != home {
		t.Errorf("the victim's next turn: %v on %d, want sticky on %d", p.Kind, p.Replica, home)
	}
	m.Done(p, now)
	// Once their bodies arrive they count like any request.
	for i := range held {
		m.BodyArrived(&held[i])
	}
	if r := m.Status().Replicas[home]; r.AwaitingBody != 0 || r.Load < 10 {
		t.Errorf("after the bodies arrived: awaiting %d, load %.2f", r.AwaitingBody, r.Load)
	}
	for _, h := range held {
		m.Done(h, now)
	}
	if r := m.Status().Replicas[home]; r.InFlight != 0 {
		t.Errorf("in flight %d after every Done", r.InFlight)
	}
	// Done without BodyArrived (the body never came) releases it too.
	p, _ = m.Place(Request{BodyPending: true, Now: now})
	m.Done(p, now)
	if st := m.Status(); st.InFlight != 0 || st.Replicas[p.Replica].AwaitingBody != 0 {
		t.Errorf("after Done of a request whose body never came: %d in flight", st.InFlight)
	}
}

// served places one turn of id with a body of the given bytes in hand and
// ends it with status, as the shim does.
func served(m *Model, id string, bytes int64, status int, at time.Time, nonInference bool) Placement {
	p, _ := m.Place(Request{SessionID: id, PromptBytes: bytes, NonInference: nonInference, Now: at})
	m.ObserveResponse(ResponseTiming{Replica: p.Replica, Status: status, SessionHash: p.SessionHash, BodyBytes: bytes}, at)
	m.Done(p, at)
	return p
}

func TestSessionTableStaysWithinItsBound(t *testing.T) {
	m := hostileModel(t, func(mc *config.ModelConfig) { mc.MaxSessions = 1000 })
	now := time.Now()
	// 100 real conversations of two turns (a 10,000-token context).
	for turn := range 2 {
		for i := range 100 {
			served(m, fmt.Sprintf("real-%d", i), 40000+int64(turn)*2000, 200, now.Add(time.Duration(turn)*time.Second), false)
		}
	}
	// Then a flood of 10,000 fresh ids, each sent twice (repetition
	// alone must not buy a place), with small prompts.
	flood := now.Add(2 * time.Second)
	for i := range 10000 {
		for range 2 {
			served(m, fmt.Sprintf("flood-%d", i), 100, 200, flood, false)
		}
	}
	st := m.Status()
	if st.Sessions != 1000 || st.SessionsEvicted != 100+10000-1000 {
		t.Errorf("%d sessions, %d evicted; want 1000 and %d", st.Sessions, st.SessionsEvicted, 100+10000-1000)
	}
	// The real conversations survived the flood.
	kept := 0
	for i := range 100 {
		if p := served(m, fmt.Sprintf("real-%d", i), 44000, 200, flood, false); p.Kind == KindSticky {
			kept++
		}
	}
	if kept != 100 {
		t.Errorf("%d of 100 real conversations kept their pin through the flood", kept)
	}
	// Live: only while active.
	if st := m.Status(); st.ActiveSessions != 1000 {
		t.Errorf("%d live right after the flood, want 1000", st.ActiveSessions)
	}
	m.ExpireIdle(flood.Add(2*ActiveWindow), 0)
	if st := m.Status(); st.ActiveSessions != 0 || st.Sessions != 1000 {
		t.Errorf("two active windows later: %d live (want 0), %d pinned (want 1000)", st.ActiveSessions, st.Sessions)
	}
}

// Requests that are not prompts (health checks, model lists) and turns a
// replica refused neither make nor keep an entry.
func TestOnlyServedInferenceKeepsAPlace(t *testing.T) {
	m := hostileModel(t, func(mc *config.ModelConfig) { mc.MaxSessions = 100 })
	now := time.Now()
	for i := range 10 {
		served(m, fmt.Sprintf("real-%d", i), 40000, 200, now, false)
	}
	for i := range 1000 {
		served(m, fmt.Sprintf("probe-%d", i), 0, 200, now.Add(time.Second), true)
	}
	if st := m.Status(); st.Sessions != 10 || st.SessionsEvicted != 0 {
		t.Errorf("after 1,000 health checks with fresh ids: %d sessions, %d evicted; want 10 and 0", st.Sessions, st.SessionsEvicted)
	}
	// Prompts the replica refused (400) weigh nothing: a flood of them
	// with large bodies goes before the real conversations.
	for i := range 1000 {
		served(m, fmt.Sprintf("refused-%d", i), 200000, 400, now.Add(2*time.Second), false)
	}
	for i := range 10 {
		if p := served(m, fmt.Sprintf("real-%d", i), 41000, 200, now.Add(3*time.Second), false); p.Kind != KindSticky {
			t.Errorf("real-%d lost its pin to refused prompts (%v)", i, p.Kind)
		}
	}
}

// The eviction heap stays consistent with the index through inserts,
// turns, credits, removals and growth.
func TestSessionTableHeapStaysConsistent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tab := newSessionTable(2, time.Hour, nil)
	tab.setLimit(300)
	for step := range 50000 {
		h := uint64(rng.IntN(2000))<<8 | uint64(rng.IntN(4)) | 1 // clustered: long probe runs
		switch rng.IntN(5) {
		case 0, 1:
			if i := tab.find(h); i >= 0 {
				tab.turn(i, int64(step), int64(rng.IntN(20000)))
			} else {
				tab.turn(tab.insert(conversation{key: h, kind: ConvSession}, rng.IntN(2), int64(step)), int64(step), -1)
			}
		case 2:
			if i := tab.find(h); i >= 0 {
				tab.remove(i)
			}
		case 3:
			tab.touchHash(h, int64(step))
		case 4:
			tab.credit(h, int64(rng.IntN(20000)), int64(step))
		}
		if step%997 == 0 {
			checkHeap(t, tab)
		}
	}
	checkHeap(t, tab)
}

// checkHeap: every live slot is in the heap exactly once at the position
// it records, no parent is worth more than its children, counts match.
func checkHeap(t *testing.T, tab *sessionTable) {
	t.Helper()
	if len(tab.heap) != tab.count || tab.count > tab.max {
		t.Fatalf("%d in the heap, %d in the table (bound %d)", len(tab.heap), tab.count, tab.max)
	}
	seen := map[int32]bool{}
	for k, i := range tab.heap {
		e := &tab.slots[i]
		if e.hash == 0 || int(e.heapPos) != k || seen[i] {
			t.Fatalf("heap[%d] = slot %d (hash %x, heapPos %d)", k, i, e.hash, e.heapPos)
		}
		seen[i] = true
		if k > 0 && tab.less(i, tab.heap[(k-1)/2]) {
			t.Fatalf("heap[%d] is worth less than its parent", k)
		}
	}
}

// The cost model's records of sessions go with their table entries: a
// flood of fresh ids leaves no more behind than the table's bound.
func TestCostRecordsStayWithinTheTablesBound(t *testing.T) {
	m := hostileModel(t, func(mc *config.ModelConfig) {
		mc.MaxSessions = 100
		mc.Policy = config.PolicyCost
	})
	now := time.Now()
	for i := range 1000 {
		served(m, fmt.Sprintf("flood-%d", i), 400, 200, now, false)
	}
	m.mu.Lock()
	n := len(m.peer.sessions)
	m.mu.Unlock()
	if n > 100 {
		t.Errorf("the cost model keeps %d sessions, the table at most 100", n)
	}
}
