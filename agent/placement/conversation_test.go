package placement

import (
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

func TestSubagentIsAConversationOfItsOwnAndTheParentKeepsItsReplica(t *testing.T) {
	m := mustModel(t, nil)
	parent := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	m.Done(parent, epoch)
	// The subagent's first request finds the parent's replica busy.
	busy := mustPlace(t, m, Request{SessionID: "other", Now: epoch})
	hold := []Placement{busy}
	for range 3 {
		hold = append(hold, mustPlace(t, m, Request{SessionID: "s", Now: epoch}))
	}
	sub := mustPlace(t, m, Request{SessionID: "s", AgentID: "a1", Now: epoch})
	if sub.Replica == parent.Replica || sub.Kind != KindNew {
		t.Fatalf("subagent's first request: %+v; the parent's replica %d is the busiest", sub, parent.Replica)
	}
	if sub.SessionHash == parent.SessionHash {
		t.Fatal("the subagent shares its parent's key")
	}
	for _, p := range hold {
		m.Done(p, epoch)
	}
	m.Done(sub, epoch)
	now := epoch.Add(time.Second)
	for turn := range 4 {
		p := mustPlace(t, m, Request{SessionID: "s", AgentID: "a1", Now: now})
		if p.Replica != sub.Replica || p.Kind != KindSticky {
			t.Fatalf("subagent turn %d: %+v, want sticky on %d", turn+2, p, sub.Replica)
		}
		m.Done(p, now)
		q := mustPlace(t, m, Request{SessionID: "s", Now: now})
		if q.Replica != parent.Replica || q.Kind != KindSticky {
			t.Fatalf("parent turn: %+v, want sticky on %d", q, parent.Replica)
		}
		m.Done(q, now)
	}
	st := m.Status()
	if st.Conversations["session"] != 2 || st.Conversations["subagent"] != 1 {
		t.Errorf("conversations %v", st.Conversations)
	}
	if st.ConversationRequests["subagent"] != 5 || st.ConversationRequests["session"] != 9 {
		t.Errorf("conversation requests %v", st.ConversationRequests)
	}
}

func TestABurstOfSubagentsSpreadsInsteadOfSpillingTheParent(t *testing.T) {
	m := mustModel(t, nil)
	parent := mustPlace(t, m, Request{SessionID: "s", Now: epoch})
	// The parent waits on its tools while 8 subagents start at once.
	per := map[int]int{}
	for i := range 8 {
		p := mustPlace(t, m, Request{SessionID: "s", AgentID: fmt.Sprintf("a%d", i), Now: epoch})
		per[p.Replica]++
	}
	for r, n := range per {
		if n > 2+boolInt(r != parent.Replica) {
			t.Errorf("subagents per replica %v (parent on %d): a burst must spread", per, parent.Replica)
		}
	}
	if len(per) < 4 {
		t.Errorf("subagents on %d replicas of 4: %v", len(per), per)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestNestedSubagentBelongsUnderTheAgentThatStartedIt(t *testing.T) {
	m := mustModel(t, nil)
	for _, r := range []Request{
		{SessionID: "s"},
		{SessionID: "s", AgentID: "a1"},
		{SessionID: "s", AgentID: "a2", ParentAgentID: "a1"},
	} {
		r.Now = epoch
		m.Done(mustPlace(t, m, r), epoch)
	}
	byHash := map[string]string{}
	for _, s := range m.Sessions(epoch, 0) {
		byHash[s.Hash] = s.Kind + ":" + s.Parent
	}
	hex := func(id string) string { return fmt.Sprintf("%016x", m.hasher.Hash(id)) }
	main, a1, a2 := hex("s"), hex("s"+agentSep+"a1"), hex("s"+agentSep+"a2")
	if byHash[main] != "session:" || byHash[a1] != "subagent:"+main || byHash[a2] != "subagent:"+a1 {
		t.Errorf("conversations %v; want %s a session, %s under it, %s under %s", byHash, main, a1, a2, a1)
	}
}

func TestAgentHeaderWithoutASessionIsNotAConversation(t *testing.T) {
	m := mustModel(t, nil)
	p := mustPlace(t, m, Request{AgentID: "a1", Now: epoch})
	if p.SessionHash != 0 || p.Kind != KindUnaffined {
		t.Errorf("%+v", p)
	}
}

func TestRequestsWithoutSessionShareAReplicaByTheirBodyStart(t *testing.T) {
	m := mustModel(t, nil)
	first := mustPlace(t, m, Request{BodyStart: []byte("s\x00uquestion one"), Now: epoch})
	if first.Kind != KindNew || first.SessionHash == 0 {
		t.Fatalf("first request: %+v", first)
	}
	m.Done(first, epoch)
	other := mustPlace(t, m, Request{BodyStart: []byte("s\x00uquestion two"), Now: epoch})
	m.Done(other, epoch)
	again := mustPlace(t, m, Request{BodyStart: []byte("s\x00uquestion one"), Now: epoch})
	if again.Replica != first.Replica || again.Kind != KindSticky {
		t.Errorf("the same start again: %+v, want sticky on %d", again, first.Replica)
	}
	if other.SessionHash == first.SessionHash {
		t.Error("two starts, one key")
	}
	if h := m.HashSession("s\x00uquestion one"); h == first.SessionHash {
		t.Error("a body's start hashes like a session id")
	}
	if st := m.Status(); st.ConversationRequests["body"] != 3 || st.Conversations["body"] != 2 || st.Unaffined != 0 {
		t.Errorf("status: %v %v unaffined %d", st.ConversationRequests, st.Conversations, st.Unaffined)
	}
}

func TestBodyKeyOffPlacesRequestsWithoutSessionByLoad(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.BodyKey = false })
	p := mustPlace(t, m, Request{BodyStart: []byte("s\x00uq"), Now: epoch})
	if p.SessionHash != 0 || p.Kind != KindUnaffined {
		t.Errorf("%+v", p)
	}
	m.SetBodyKey(true)
	if p := mustPlace(t, m, Request{BodyStart: []byte("s\x00uq"), Now: epoch}); p.Kind != KindNew {
		t.Errorf("switched on: %+v", p)
	}
	if st := m.Status(); st.ConversationRequests["none"] != 1 || st.ConversationRequests["body"] != 1 {
		t.Errorf("conversation requests %v", st.ConversationRequests)
	}
}

func TestASessionHeaderWinsOverTheBody(t *testing.T) {
	m := mustModel(t, nil)
	p := mustPlace(t, m, Request{SessionID: "s", BodyStart: []byte("s\x00uq"), Now: epoch})
	if p.SessionHash != m.HashSession("s") {
		t.Errorf("keyed %x, want the session's", p.SessionHash)
	}
}

// busy puts n requests of other sessions in flight on replica i.
func busy(t *testing.T, m *Model, i, n int) []Placement {
	var out []Placement
	for k := 0; len(out) < n && k < 1000; k++ {
		p := mustPlace(t, m, Request{SessionID: fmt.Sprintf("load-%d-%d", i, k), Now: epoch})
		if p.Replica == i {
			out = append(out, p)
		} else {
			m.Done(p, epoch)
		}
	}
	return out
}

func TestAContextThatStartsOverMovesWithItsSecondRequest(t *testing.T) {
	m := mustModel(t, nil)
	home := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 400_000, Now: epoch})
	m.Done(home, epoch)
	hold := busy(t, m, home.Replica, 3)
	// A compacted context: a summary and the new message.
	first := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 40_000, Now: epoch})
	if first.Kind != KindFresh || first.Replica == home.Replica {
		t.Fatalf("the smaller prompt: %+v, want fresh away from the busy %d", first, home.Replica)
	}
	m.Done(first, epoch)
	next := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 42_000, Now: epoch})
	if next.Kind != KindFresh || next.Replica != first.Replica {
		t.Fatalf("the next turn of the new context: %+v, want it where that started (%d)", next, first.Replica)
	}
	m.Done(next, epoch)
	after := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 44_000, Now: epoch})
	if after.Kind != KindSticky || after.Replica != first.Replica {
		t.Errorf("and on: %+v, want sticky on %d", after, first.Replica)
	}
	m.Done(after, epoch)
	for _, p := range hold {
		m.Done(p, epoch)
	}
}

func TestASideRequestLeavesTheConversationWhereItsContextIs(t *testing.T) {
	m := mustModel(t, nil)
	home := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 400_000, Now: epoch})
	m.Done(home, epoch)
	hold := busy(t, m, home.Replica, 3)
	side := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 2_000, Now: epoch}) // a title, say
	if side.Kind != KindFresh || side.Replica == home.Replica {
		t.Fatalf("the side request: %+v", side)
	}
	m.Done(side, epoch)
	back := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 401_000, Now: epoch})
	if back.Kind != KindSticky || back.Replica != home.Replica {
		t.Errorf("the conversation's next turn: %+v, want sticky on %d", back, home.Replica)
	}
	m.Done(back, epoch)
	for _, p := range hold {
		m.Done(p, epoch)
	}
}

func TestACompactedContextMovesAtOnceWhenTheClientSaysSo(t *testing.T) {
	m := mustModel(t, nil)
	home := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 400_000, Now: epoch})
	m.Done(home, epoch)
	hold := busy(t, m, home.Replica, 3)
	p := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 30_000, ContextCompacted: true, Now: epoch})
	if p.Kind != KindFresh || p.Replica == home.Replica {
		t.Fatalf("%+v", p)
	}
	m.Done(p, epoch)
	if q := mustPlace(t, m, Request{SessionID: "s", PromptBytes: 31_000, Now: epoch}); q.Kind != KindSticky || q.Replica != p.Replica {
		t.Errorf("next turn %+v, want sticky on %d", q, p.Replica)
	} else {
		m.Done(q, epoch)
	}
	for _, p := range hold {
		m.Done(p, epoch)
	}
}

// Admission weighs conversations, not session ids: a subagent is not let
// in on its live parent's room, and a conversation keyed by its body waits
// like any other.
func TestAdmissionParksSubagentsAndBodyKeyedConversationsByTheirOwnKey(t *testing.T) {
	m := mustAdmissionModel(t, 1, 12_000, queue)
	parent, w := admit(t, m, "s", 10_000, epoch)
	if w != nil {
		t.Fatal("the first session waits on an empty replica")
	}
	_, w, err := m.Admit(Request{SessionID: "s", AgentID: "a1", PromptBytes: promptBytes(10_000), Now: epoch})
	if err != nil || w == nil {
		t.Fatalf("a subagent with no room beside its live parent: wait %v, err %v", w, err)
	}
	if w.hash != m.conversationOf(Request{SessionID: "s", AgentID: "a1"}).key {
		t.Errorf("parked under %x, not the subagent's key", w.hash)
	}
	m.Cancel(w)
	_, w, err = m.Admit(Request{BodyStart: []byte("s\x00uq"), PromptBytes: promptBytes(10_000), Now: epoch})
	if err != nil || w == nil {
		t.Fatalf("a body-keyed conversation with no room: wait %v, err %v", w, err)
	}
	m.Cancel(w)
	m.Done(parent, epoch)
}

// A conversation larger than every replica's cache can be held by none:
// it never waits for room, takes none, and is counted cached nowhere.
func TestAConversationLargerThanAnyCacheIsCachedNowhere(t *testing.T) {
	m := mustAdmissionModel(t, 2, 100_000, queue)
	a, _ := admit(t, m, "a", 90_000, epoch)
	b, _ := admit(t, m, "b", 90_000, epoch)
	p, w := admit(t, m, "huge", 150_000, epoch)
	if w != nil {
		t.Fatal("a conversation no cache holds waits for room")
	}
	s := m.peer.sessions[m.HashSession("huge")]
	if s == nil || s.live != 0 || s.ctx != 0 {
		t.Fatalf("its record %+v: counted live or cached", s)
	}
	m.Done(p, epoch)
	if h := m.held(s); h != 0 {
		t.Errorf("held %v after its turn", h)
	}
	if live := m.physical(p.Replica); live > 100_000 {
		t.Errorf("live context %v on its replica: it took room", live)
	}
	m.Done(a, epoch)
	m.Done(b, epoch)
}
