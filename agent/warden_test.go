package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/sim"
)

// mustSim starts the simulated vLLM (fast clock) and stops it at cleanup.
func mustSim(tb testing.TB, cfg sim.ServerConfig) *sim.Servers {
	tb.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Speed == 0 {
		cfg.Speed = 50
	}
	s, err := sim.Serve(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// mustWarden starts a warden with a fast poller and an admin server on a
// free loopback port.
func mustWarden(tb testing.TB, models ...config.ModelConfig) *Warden {
	tb.Helper()
	cfg := &config.Config{Admin: "127.0.0.1:0", PollInterval: 20 * time.Millisecond, HitRateWindow: time.Second}
	cfg.ApplyDefaults()
	for i, mc := range models {
		if mc.Frontend == "" {
			mc.Frontend = fmt.Sprintf("127.0.0.1:%d", 18000+i)
		}
		cfg.Models = append(cfg.Models, mc)
	}
	w, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	return w
}

func simModel(name string, s *sim.Servers, shape string) config.ModelConfig {
	mc := config.DefaultModel(name)
	if shape == sim.ShapeRanks {
		mc.Endpoint = s.URLs()[0]
	} else {
		mc.Replicas = s.URLs()
	}
	return mc
}

// mustSend does what the shim does with a placement: one chat completion to
// p.Addr (with the rank header when asked), then Done.
func mustSend(tb testing.TB, m *placement.Model, p placement.Placement, session string, turn int) {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{
		"model":      "qwen3-4b",
		"max_tokens": 4,
		"messages":   []map[string]string{{"role": "user", "content": fmt.Sprintf("session %s turn %d: hello", session, turn)}},
	})
	req, err := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if p.RankHeader >= 0 {
		req.Header.Set("X-data-parallel-rank", strconv.Itoa(p.RankHeader))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("sim answered %s", resp.Status)
	}
	m.Done(p, time.Now())
}

func TestSixTurnsOfOneSessionLandOnOneSimReplica(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 4})
	w := mustWarden(t, simModel("m", s, sim.ShapePorts))
	m := w.Models()[0]
	pinned := -1
	for turn := range 6 {
		p, err := m.Place(placement.Request{SessionID: "6f1c2d3e-aaaa-4bbb-8ccc-000000000001", Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if pinned < 0 {
			pinned = p.Replica
		} else if p.Replica != pinned {
			t.Fatalf("turn %d went to %d, pinned %d", turn, p.Replica, pinned)
		}
		mustSend(t, m, p, "a", turn)
	}
	for i := range 4 {
		want := uint64(0)
		if i == pinned {
			want = 6
		}
		if got := s.Stats(i).RequestsDone; got != want {
			t.Errorf("sim replica %d served %d requests, want %d", i, got, want)
		}
	}
	if st := m.Status(); st.StickyShare != 1 || st.Replicas[pinned].Sticky != 5 {
		t.Errorf("sticky share %v, sticky %d", st.StickyShare, st.Replicas[pinned].Sticky)
	}
}

func TestFourNewSessionsLandOnFourIdleSimReplicas(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 4})
	w := mustWarden(t, simModel("m", s, sim.ShapePorts))
	m := w.Models()[0]
	for i := range 4 {
		p, err := m.Place(placement.Request{SessionID: fmt.Sprint("session-", i), Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		mustSend(t, m, p, fmt.Sprint(i), 0)
	}
	for i := range 4 {
		if got := s.Stats(i).RequestsDone; got != 1 {
			t.Errorf("sim replica %d served %d, want 1", i, got)
		}
	}
}

func TestOneEndpointShapeWritesRankHeaderUntilAffinityOff(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 4, Shape: sim.ShapeRanks})
	mc := simModel("dp", s, sim.ShapeRanks)
	mc.Ranks = 4
	w := mustWarden(t, mc)
	m := w.Models()[0]
	for turn := range 3 {
		p, err := m.Place(placement.Request{SessionID: "dp-session", Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if p.RankHeader != p.Replica || p.RankHeader < 0 {
			t.Fatalf("placement %+v: want a rank header", p)
		}
		mustSend(t, m, p, "dp", turn)
		if got := s.Stats(p.Replica).RequestsDone; got != uint64(turn+1) {
			t.Fatalf("rank %d served %d, want %d", p.Replica, got, turn+1)
		}
	}
	m.SetAffinity(false)
	p, err := m.Place(placement.Request{SessionID: "dp-session", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if p.RankHeader != -1 || p.Replica != -1 {
		t.Fatalf("affinity off: %+v, want no rank header", p)
	}
	mustSend(t, m, p, "dp", 3)
	if st := m.Status(); st.InFlight != 0 {
		t.Errorf("in flight %d", st.InFlight)
	}
	// The poller reads every rank's numbers from the one /metrics by engine label.
	testutil.Eventually(t, 10*time.Second, "per-rank prefix counters", func() bool {
		n := 0
		for i := range m.Replicas() {
			if m.ReplicaMetrics(i).PrefixQueries > 0 {
				n++
			}
		}
		return n >= 1 && m.ReplicaMetrics(0).KVCapacityTokens > 0
	})
}

func TestUnhealthyReplicaIsExcludedAndReadmitted(t *testing.T) {
	healthy := mustSim(t, sim.ServerConfig{Replicas: 1})
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	flaky, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 1, Listen: addr, Speed: 50})
	if err != nil {
		t.Fatal(err)
	}
	mc := config.DefaultModel("m")
	mc.Replicas = []string{healthy.URLs()[0], "http://" + addr}
	w := mustWarden(t, mc)
	m := w.Models()[0]
	testutil.Eventually(t, 10*time.Second, "first poll", func() bool { return m.Status().Replicas[1].ObservedAt != nil })

	// A session pinned to the flaky replica.
	p, err := m.Place(placement.Request{SessionID: "x", PinnedHeader: "1", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, m, p, "x", 0)

	flaky.Close()
	testutil.Eventually(t, 10*time.Second, "replica 1 unhealthy", func() bool { return !m.Status().Replicas[1].Healthy })
	for i := range 6 {
		q, err := m.Place(placement.Request{SessionID: fmt.Sprint("new", i), Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if q.Replica == 1 {
			t.Fatal("unhealthy replica got a new session")
		}
		m.Done(q, time.Now())
	}
	q, err := m.Place(placement.Request{SessionID: "x", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if q.Replica != 0 || q.Kind != placement.KindRepinned {
		t.Fatalf("session of the unhealthy replica: %+v", q)
	}
	mustSend(t, m, q, "x", 1)

	flaky2 := mustSim(t, sim.ServerConfig{Replicas: 1, Listen: addr})
	_ = flaky2
	testutil.Eventually(t, 10*time.Second, "replica 1 healthy again", func() bool { return m.Status().Replicas[1].Healthy })
	seen1 := false
	for i := range 8 {
		q, err := m.Place(placement.Request{SessionID: fmt.Sprint("back", i), Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		seen1 = seen1 || q.Replica == 1
	}
	if !seen1 {
		t.Error("readmitted replica got no new session")
	}
	if st := m.Status(); st.Replicas[1].PollFailures < 3 {
		t.Errorf("poll failures %d", st.Replicas[1].PollFailures)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestSpillShowsInAdminCountersAndSessionStaysPinned(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 3})
	mc := simModel("m", s, sim.ShapePorts)
	mc.SpillThreshold = config.SpillThreshold{N: 2}
	w := mustWarden(t, mc)
	m := w.Models()[0]
	now := time.Now()
	a, _ := m.Place(placement.Request{SessionID: "busy", Now: now})
	b, _ := m.Place(placement.Request{SessionID: "busy", Now: now})
	c, err := m.Place(placement.Request{SessionID: "busy", Now: now})
	if err != nil || c.Kind != placement.KindSpilled || c.Replica == a.Replica || b.Replica != a.Replica {
		t.Fatalf("a %+v b %+v c %+v %v", a, b, c, err)
	}
	mustSend(t, m, c, "busy", 2)
	var resp adminapi.ModelsResponse
	mustGetJSON(t, "http://"+w.AdminAddr()+"/api/v1/models", &resp)
	st := resp.Models[0]
	if st.Replicas[c.Replica].SpilledIn != 1 || st.Replicas[a.Replica].Sessions != 1 || st.Replicas[c.Replica].Sessions != 0 || st.InFlight != 2 {
		t.Errorf("admin view after a spill: %+v", st)
	}
	var sess adminapi.SessionsResponse
	mustGetJSON(t, "http://"+w.AdminAddr()+"/api/v1/sessions", &sess)
	if len(sess.Sessions) != 1 || sess.Sessions[0].Replica != a.Replica || sess.Sessions[0].Turns != 3 {
		t.Errorf("session after a spill: %+v", sess.Sessions)
	}
	m.Done(a, now)
	m.Done(b, now)
}
