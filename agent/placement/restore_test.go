package placement

import (
	"testing"
	"time"
)

func TestRestoredSessionReturnsToItsReplica(t *testing.T) {
	m := mustModel(t, nil)
	h := m.HashSession("conversation-1")
	if !m.RestoreSession(h, 2, epoch.Add(-time.Minute), epoch) {
		t.Fatal("a fresh session on a valid replica was not restored")
	}
	p := mustPlace(t, m, Request{SessionID: "conversation-1", Now: epoch})
	if p.Replica != 2 || p.Kind != KindSticky {
		t.Fatalf("after restore: replica %d kind %v, want 2 sticky", p.Replica, p.Kind)
	}
}

func TestRestoreSkipsStaleUnknownReplicaAndKnownSessions(t *testing.T) {
	m := mustModel(t, nil)
	ttl := m.Config().SessionTTL
	if m.RestoreSession(m.HashSession("old"), 1, epoch.Add(-ttl-time.Second), epoch) {
		t.Error("restored a session idle for longer than the TTL")
	}
	if m.RestoreSession(m.HashSession("far"), m.Replicas(), epoch, epoch) {
		t.Error("restored a session onto a replica the model does not have")
	}
	p := mustPlace(t, m, Request{SessionID: "live", Now: epoch})
	other := (p.Replica + 1) % m.Replicas()
	if m.RestoreSession(m.HashSession("live"), other, epoch, epoch) {
		t.Error("a restore overrode a session the warden already knows")
	}
	if m.LiveSessions() != 1 {
		t.Errorf("%d live sessions, want 1", m.LiveSessions())
	}
}
