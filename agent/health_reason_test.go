package agent

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/sim"
)

// mustBackend serves h on a loopback port: a replica URL that answers, but
// not as a healthy vLLM does.
func mustBackend(tb testing.TB, h http.HandlerFunc) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestUnhealthyReplicaSaysWhy: each way a replica fails its poll is shown
// beside it in GET /api/v1/models and /readyz, and a backend that is not
// vLLM (healthy, with a /metrics of its own) is kept out of placement
// instead of looking idle.
func TestUnhealthyReplicaSaysWhy(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 1})
	status503 := mustBackend(t, func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusServiceUnavailable)
	})
	notVLLM := mustBackend(t, func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "# TYPE go_goroutines gauge\ngo_goroutines 7\n")
	})
	refused := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	mc := config.DefaultModel("m")
	mc.Replicas = []string{s.URLs()[0], status503, notVLLM, refused}
	w := mustWarden(t, mc)
	m := w.Models()[0]
	base := "http://" + w.AdminAddr()

	want := []string{"", "GET /health: HTTP 503 Service Unavailable", ErrNoVLLMSeries.Error(), "GET /health: dial tcp"}
	var resp adminapi.ModelsResponse
	testutil.Eventually(t, 10*time.Second, "three replicas unhealthy", func() bool {
		mustGetJSON(t, base+"/api/v1/models", &resp)
		for i, r := range resp.Models[0].Replicas {
			if r.Healthy != (i == 0) || !strings.HasPrefix(r.Reason, want[i]) || (want[i] == "") != (r.Reason == "") {
				return false
			}
		}
		return true
	})
	if r := resp.Models[0].Replicas[3].Reason; !strings.Contains(r, "connection refused") {
		t.Errorf("replica 3: reason %q, want the refused connection", r)
	}
	for range 20 {
		if p, err := m.Place(placementRequest("s" + fmt.Sprint(time.Now().UnixNano()))); err != nil || p.Replica != 0 {
			t.Fatalf("placed on %d (%v): only replica 0 is vLLM and healthy", p.Replica, err)
		}
	}

	var ready adminapi.Readiness
	w.SetServing(true)
	if code := mustGetJSON(t, base+"/readyz", &ready); code != http.StatusOK || ready.Models[0].Ready != 1 || len(ready.Models[0].Unready) != 3 {
		t.Fatalf("/readyz %d %+v", code, ready)
	}
	if u := ready.Models[0].Unready[0]; u != "replica 1 ("+status503+"): GET /health: HTTP 503 Service Unavailable" {
		t.Errorf("unready[0] = %q", u)
	}

	// The only vLLM one goes too: not ready, and the reason names each.
	s.Close()
	testutil.Eventually(t, 10*time.Second, "not ready", func() bool {
		return mustGetJSON(t, base+"/readyz", &ready) == http.StatusServiceUnavailable
	})
	if len(ready.Reasons) != 1 || !strings.Contains(ready.Reasons[0], "replica 2 ("+notVLLM+"): "+ErrNoVLLMSeries.Error()) ||
		!strings.Contains(ready.Reasons[0], "replica 0 (") {
		t.Errorf("reasons %q", ready.Reasons)
	}
}

// TestDrainMovesConversationsAtTheirNextTurn: a drained replica takes no
// new conversation, a live one moves at its next turn, a request in
// flight there is left alone (the replica stays healthy to the shim),
// and undoing the drain puts it back.
func TestDrainMovesConversationsAtTheirNextTurn(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 2})
	w := mustWarden(t, simModel("qwen", s, sim.ShapePorts))
	m := w.Models()[0]
	base := "http://" + w.AdminAddr()
	testutil.Eventually(t, 10*time.Second, "polled", func() bool { return w.Readiness().Models[0].Ready == 2 })

	first, err := m.Place(placementRequest("conv"))
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, m, first, "conv", 0)
	inFlight, err := m.Place(placementRequest("conv")) // its second turn, streaming while the drain starts
	if err != nil || inFlight.Replica != first.Replica {
		t.Fatalf("second turn on %d (%v), first on %d", inFlight.Replica, err, first.Replica)
	}
	drained := first.Replica
	url := fmt.Sprintf("%s/api/v1/models/qwen/replicas/%d/drain", base, drained)
	if code := mustPut(t, "", url, `{"drain": true}`); code != http.StatusUnauthorized {
		t.Fatalf("drain without the token: %d", code)
	}
	if code := mustPut(t, w.AdminToken(), url, `{"drain": true}`); code != http.StatusOK {
		t.Fatalf("drain: %d", code)
	}
	if !m.Healthy(drained) {
		t.Fatal("a draining replica must stay healthy to the shim: its requests in flight finish")
	}
	mustSend(t, m, inFlight, "conv", 1)
	for turn := 2; turn < 5; turn++ {
		p, err := m.Place(placementRequest("conv"))
		if err != nil || p.Replica == drained {
			t.Fatalf("turn %d on %d (%v): the conversation should have moved off %d", turn, p.Replica, err, drained)
		}
		m.Done(p, time.Now())
	}
	for i := range 10 {
		if p, _ := m.Place(placementRequest(fmt.Sprint("new", i))); p.Replica == drained {
			t.Fatal("a new conversation went to the draining replica")
		}
	}
	var st adminapi.ModelStatus
	mustGetJSON(t, base+"/api/v1/models/qwen", &st)
	if r := st.Replicas[drained]; !r.Draining || !r.Healthy || !strings.HasPrefix(r.Reason, "draining") {
		t.Fatalf("status of the drained replica: %+v", r)
	}
	if v := gaugeValue(t, mustScrape(t, base), "lmwarden_replica_draining", fmt.Sprint(drained)); v != 1 {
		t.Errorf("lmwarden_replica_draining = %v", v)
	}

	for _, bad := range []struct {
		url, body string
		code      int
	}{
		{url, `{}`, http.StatusBadRequest},
		{url, `{"drain": "yes"}`, http.StatusBadRequest},
		{base + "/api/v1/models/qwen/replicas/7/drain", `{"drain": true}`, http.StatusNotFound},
		{base + "/api/v1/models/qwen/replicas/x/drain", `{"drain": true}`, http.StatusNotFound},
		{base + "/api/v1/models/nope/replicas/0/drain", `{"drain": true}`, http.StatusNotFound},
	} {
		if code := mustPut(t, w.AdminToken(), bad.url, bad.body); code != bad.code {
			t.Errorf("PUT %s %s: %d, want %d", bad.url, bad.body, code, bad.code)
		}
	}

	if code := mustPut(t, w.AdminToken(), url, `{"drain": false}`); code != http.StatusOK {
		t.Fatalf("undrain: %d", code)
	}
	if m.Draining(drained) || !w.Readiness().Ready && w.Readiness().Models[0].Ready != 2 {
		t.Fatal("undrained replica still out")
	}
	seen := false
	for i := range 20 {
		p, _ := m.Place(placementRequest(fmt.Sprint("back", i)))
		seen = seen || p.Replica == drained
	}
	if !seen {
		t.Error("no new conversation reached the undrained replica")
	}
}

func placementRequest(session string) placement.Request {
	return placement.Request{SessionID: session, Now: time.Now()}
}

// gaugeValue reads the sample of family name whose replica label is replica.
func gaugeValue(tb testing.TB, fams map[string]*dto.MetricFamily, name, replica string) float64 {
	tb.Helper()
	for _, m := range fams[name].GetMetric() {
		if labelsMatch(m, map[string]string{"replica": replica}) {
			return sampleValue(m)
		}
	}
	tb.Fatalf("%s{replica=%q} not found", name, replica)
	return 0
}
