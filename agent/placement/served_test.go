package placement

import (
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// Served moves the request's count and the session's pin to the replica
// that served; Done then releases that one.
func TestServedMovesTheRequestAndThePin(t *testing.T) {
	m := mustModel(t, nil)
	now := time.Now()
	p, err := m.Place(Request{SessionID: "s", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	to := (p.Replica + 1) % m.Replicas()
	q := m.Served(p, to)
	if q.Replica != to || q.Addr != m.reps[to].addr {
		t.Fatalf("served placement %+v, want replica %d", q, to)
	}
	st := m.Status()
	if st.Replicas[p.Replica].InFlight != 0 || st.Replicas[to].InFlight != 1 || st.Replicas[to].Sessions != 1 {
		t.Errorf("after Served: %+v", st.Replicas)
	}
	m.Done(q, now)
	if m.Status().InFlight != 0 || m.Status().Replicas[to].InFlight != 0 {
		t.Error("Done did not release the serving replica")
	}
	r, _ := m.Place(Request{SessionID: "s", Now: now})
	if r.Replica != to || r.Kind != KindSticky {
		t.Errorf("next turn on %d (%s), want sticky on %d", r.Replica, r.Kind, to)
	}
	m.Done(r, now)
	if same := m.Served(r, r.Replica); same != r {
		t.Error("Served to the same replica changed the placement")
	}
}

func TestKnownSession(t *testing.T) {
	m := mustModel(t, func(mc *config.ModelConfig) { mc.SessionTTL = time.Minute })
	now := time.Now()
	if m.KnownSession("s", now) || m.KnownSession("", now) {
		t.Fatal("known before any request")
	}
	p, _ := m.Place(Request{SessionID: "s", Now: now})
	m.Done(p, now)
	if !m.KnownSession("s", now.Add(time.Second)) {
		t.Error("a session just placed is not known")
	}
	if m.KnownSession("s", now.Add(2*time.Minute)) {
		t.Error("a session idle for longer than its TTL is still known")
	}
	if m.LiveSessions() != 0 {
		t.Error("KnownSession placed something")
	}
}
