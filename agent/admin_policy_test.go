package agent

import (
	"net/http"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/sim"
)

// TestAdminPolicySwitchKeepsSessions switches a running model from sticky
// to hash and back through the admin API: the status reports the policy,
// placement follows it, and the session table survives the switch.
func TestAdminPolicySwitchKeepsSessions(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 4})
	w := mustWarden(t, simModel("qwen", s, sim.ShapePorts))
	m := w.Models()[0]
	base := "http://" + w.AdminAddr()

	first, err := m.Place(placement.Request{SessionID: "keep", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, m, first, "keep", 0)

	if code := mustPut(t, w.AdminToken(), base+"/api/v1/models/qwen/policy", `{"policy": "hash"}`); code != http.StatusOK {
		t.Fatalf("PUT policy hash: %d", code)
	}
	var st adminapi.ModelStatus
	mustGetJSON(t, base+"/api/v1/models/qwen", &st)
	if st.Policy != "hash" || st.Effective != "hash" {
		t.Errorf("after PUT hash: policy %q, effective %q", st.Policy, st.Effective)
	}
	// hash places a session by its id alone: the same id, the same replica,
	// whatever the load (sticky would spill past the threshold).
	var held []placement.Placement
	for i := range 2 * config.DefaultSpillThreshold {
		p, err := m.Place(placement.Request{SessionID: "hashed", Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
		if p.Replica != held[0].Replica {
			t.Errorf("hash placed request %d of one session on %d, the first on %d", i, p.Replica, held[0].Replica)
		}
	}
	for _, p := range held {
		m.Done(p, time.Now())
	}

	if code := mustPut(t, w.AdminToken(), base+"/api/v1/models/qwen/policy", `{"policy": "sticky"}`); code != http.StatusOK {
		t.Fatalf("PUT policy sticky: %d", code)
	}
	again, _ := m.Place(placement.Request{SessionID: "keep", Now: time.Now()})
	m.Done(again, time.Now())
	if again.Replica != first.Replica {
		t.Errorf("session placed on %d before the switches, %d after", first.Replica, again.Replica)
	}

	if code := mustPut(t, w.AdminToken(), base+"/api/v1/models/nope/policy", `{"policy": "sticky"}`); code != http.StatusNotFound {
		t.Errorf("unknown model: %d, want 404", code)
	}
	for _, bad := range []string{``, `{}`, `{"policy": "fastest"}`, `{"policy": 3}`, `{"policy": "sticky", "x": 1}`} {
		if code := mustPut(t, w.AdminToken(), base+"/api/v1/models/qwen/policy", bad); code != http.StatusBadRequest {
			t.Errorf("body %q: %d, want 400", bad, code)
		}
	}
}
