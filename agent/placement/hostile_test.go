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

func TestSessionTableStaysWithinItsBound(t *testing.T) {
	m := hostileModel(t, func(mc *config.ModelConfig) { mc.MaxSessions = 1000 })
	now := time.Now()
	// 100 real conversations, each back for a second turn.
	for turn := range 2 {
		for i := range 100 {
			p, _ := m.Place(Request{SessionID: fmt.Sprintf("real-%d", i), Now: now.Add(time.Duration(turn) * time.Second)})
			m.Done(p, now)
		}
	}
	// Then a flood of 10,000 fresh ids.
	flood := now.Add(2 * time.Second)
	for i := range 10000 {
		p, _ := m.Place(Request{SessionID: fmt.Sprintf("flood-%d", i), Now: flood})
		m.Done(p, flood)
	}
	st := m.Status()
	if st.Sessions != 1000 || st.SessionsEvicted != 100+10000-1000 {
		t.Errorf("%d sessions, %d evicted; want 1000 and %d", st.Sessions, st.SessionsEvicted, 100+10000-1000)
	}
	// The conversations that came back survived the flood.
	kept := 0
	for i := range 100 {
		p, _ := m.Place(Request{SessionID: fmt.Sprintf("real-%d", i), Now: flood})
		if p.Kind == KindSticky {
			kept++
		}
		m.Done(p, flood)
	}
	if kept != 100 {
		t.Errorf("%d of 100 returning conversations kept their pin through the flood", kept)
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

// The recency lists stay consistent with the index through inserts,
// turns, removals and growth (a reference of the same rules in Go maps).
func TestSessionTableLRUMatchesAReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tab := newSessionTable(2, time.Hour, nil)
	tab.setLimit(300)
	for step := range 50000 {
		h := uint64(rng.IntN(2000))<<8 | uint64(rng.IntN(4)) | 1 // clustered: long probe runs
		switch rng.IntN(4) {
		case 0, 1:
			if i := tab.find(h); i >= 0 {
				tab.turn(i, int64(step))
			} else {
				tab.turn(tab.insert(h, rng.IntN(2), int64(step)), int64(step))
			}
		case 2:
			if i := tab.find(h); i >= 0 {
				tab.remove(i)
			}
		case 3:
			tab.touchHash(h, int64(step))
		}
		if step%997 == 0 {
			checkLRU(t, tab)
		}
	}
	checkLRU(t, tab)
}

// checkLRU walks both recency lists: every live slot is on exactly the
// list of its segment, links agree both ways, counts match.
func checkLRU(t *testing.T, tab *sessionTable) {
	t.Helper()
	seen := map[int]bool{}
	for seg, l := range tab.lru {
		n, prev := 0, int32(-1)
		for i := l.head; i >= 0; i = tab.slots[i].next {
			e := &tab.slots[i]
			if e.hash == 0 || segment(e) != seg || e.prev != prev || seen[int(i)] {
				t.Fatalf("segment %d: slot %d (hash %x, prev %d want %d) is wrong", seg, i, e.hash, e.prev, prev)
			}
			seen[int(i)] = true
			prev = i
			n++
		}
		if n != l.n || l.tail != prev {
			t.Fatalf("segment %d: %d linked, counted %d, tail %d want %d", seg, n, l.n, l.tail, prev)
		}
	}
	if len(seen) != tab.count || tab.count > tab.max {
		t.Fatalf("%d linked, %d in the table (bound %d)", len(seen), tab.count, tab.max)
	}
}
