package agent

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
	"github.com/lmwarden/lmwarden/sim"
)

func TestHealthzIsLiveAndReadyzWaitsForFrontendsAndAPolledReplica(t *testing.T) {
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	mc := config.DefaultModel("m")
	mc.Replicas = []string{"http://" + addr} // nothing listens yet
	w := mustWarden(t, mc)
	base := "http://" + w.AdminAddr()

	var health map[string]string
	if code := mustGetJSON(t, base+"/healthz", &health); code != http.StatusOK || health["status"] != "ok" {
		t.Fatalf("/healthz %d %v", code, health)
	}
	var r adminapi.Readiness
	if code := mustGetJSON(t, base+"/readyz", &r); code != http.StatusServiceUnavailable || r.Ready || len(r.Reasons) != 2 {
		t.Fatalf("/readyz before anything: %d %+v", code, r)
	}
	w.SetServing(true)
	if code := mustGetJSON(t, base+"/readyz", &r); code != http.StatusServiceUnavailable || len(r.Reasons) != 1 ||
		r.Models[0].Ready != 0 || r.Models[0].Replicas != 1 {
		t.Fatalf("/readyz without a replica: %d %+v", code, r)
	}

	// The replica comes up: ready once it has been polled.
	s, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 1, Listen: addr, Speed: 50})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "ready", func() bool {
		return mustGetJSON(t, base+"/readyz", &r) == http.StatusOK && r.Ready && r.Models[0].Ready == 1
	})
	// It goes away: not ready once the poller has given up on it.
	s.Close()
	testutil.Eventually(t, 10*time.Second, "not ready", func() bool {
		return mustGetJSON(t, base+"/readyz", &r) == http.StatusServiceUnavailable && r.Models[0].Ready == 0
	})
	// Shutting down: not ready whatever the replicas say.
	w.SetServing(false)
	if mustGetJSON(t, base+"/readyz", &r); r.Reasons[0] != "frontends not listening (starting or shutting down)" {
		t.Fatalf("reasons %q", r.Reasons)
	}
}

func TestWardenInfoAndBuildInfoMetric(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 1})
	cfg := &config.Config{Admin: "127.0.0.1:0", PollInterval: 20 * time.Millisecond, HitRateWindow: time.Second}
	cfg.ApplyDefaults()
	mc := simModel("qwen", s, sim.ShapePorts)
	mc.Frontend = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg.Models = []config.ModelConfig{mc}
	build := adminapi.BuildInfo{Version: "v9.8.7", Revision: "abc123-dirty", GoVersion: "go1.99"}
	w, err := NewWithOptions(cfg, Options{Build: build, Datapath: adminapi.DatapathInfo{Name: "user", Reason: "--datapath user"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	base := "http://" + w.AdminAddr()

	var info adminapi.WardenInfo
	if code := mustGetJSON(t, base+"/api/v1/warden", &info); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if info.Build != build || info.Datapath.Name != "user" || info.Datapath.Reason != "--datapath user" ||
		info.StartedAt.IsZero() || info.Ready || len(info.Models) != 1 {
		t.Fatalf("info %+v", info)
	}

	fams := mustScrape(t, base)
	bi := fams["lmwarden_build_info"].GetMetric()
	if len(bi) != 1 || !labelsMatch(bi[0], map[string]string{"version": "v9.8.7", "revision": "abc123-dirty", "goversion": "go1.99"}) || vllmmetrics.Value(bi[0]) != 1 {
		t.Fatalf("lmwarden_build_info %v", bi)
	}
}

// mustScrape reads and parses GET base/metrics (base: http://host:port).
func mustScrape(tb testing.TB, base string) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	fams, err := vllmmetrics.Parse(resp.Body, resp.Header)
	if err != nil {
		tb.Fatal(err)
	}
	return fams
}
