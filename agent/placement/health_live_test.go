package placement

import (
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// A replica that goes down has lost the conversations the cost model
// counted live there (its process restarts empty): their rooms free at
// once, but for a conversation whose turn is still in flight there.
func TestAReplicaThatGoesDownFreesItsLiveRooms(t *testing.T) {
	m := prefillModel(t, config.DefaultModel("m").SpillThreshold)
	turn(t, m, "a", 10_000, 0, false)
	turn(t, m, "b", 20_000, time.Second, true) // still in flight
	m.mu.Lock()
	before := m.peer.reps[0].liveN
	m.mu.Unlock()
	if before != 2 {
		t.Fatalf("%d conversations live on replica 0, want 2", before)
	}
	m.SetHealthy(0, false)
	m.mu.Lock()
	defer m.mu.Unlock()
	pr := &m.peer.reps[0]
	if pr.liveN != 1 || len(pr.holders) != 1 || pr.holders[0].inflight != 1 {
		t.Fatalf("after replica 0 went down: %d live there, want only b, whose turn runs", pr.liveN)
	}
}
