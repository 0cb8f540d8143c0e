package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
	"github.com/lmwarden/lmwarden/sim"
)

func mustGetJSON(tb testing.TB, url string, v any) int {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode
}

// mustPut sends a PUT with the admin token (none when token is "").
func mustPut(tb testing.TB, token, url, body string) int {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdminModelsJSONHasEveryField(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 2})
	w := mustWarden(t, simModel("qwen", s, sim.ShapePorts))
	m := w.Models()[0]
	p, _ := m.Place(placement.Request{SessionID: "s", Now: time.Now()})
	mustSend(t, m, p, "s", 0)
	base := "http://" + w.AdminAddr()

	var raw map[string][]map[string]any
	if code := mustGetJSON(t, base+"/api/v1/models", &raw); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	models := raw["models"]
	if len(models) != 1 {
		t.Fatalf("models: %v", raw)
	}
	for _, k := range []string{"name", "affinity", "policy", "spill_threshold", "spill_threshold_auto", "sticky_share", "in_flight", "replicas", "sessions", "unaffined", "invalid_pins"} {
		if _, ok := models[0][k]; !ok {
			t.Errorf("model field %q missing", k)
		}
	}
	reps := models[0]["replicas"].([]any)
	if len(reps) != 2 {
		t.Fatalf("replicas: %v", reps)
	}
	for _, k := range []string{"url", "in_flight", "sticky", "spilled_in", "client_pinned", "running", "waiting", "kv_used", "prefix_hit_rate", "healthy"} {
		if _, ok := reps[0].(map[string]any)[k]; !ok {
			t.Errorf("replica field %q missing", k)
		}
	}

	if code := mustPut(t, w.AdminToken(), base+"/api/v1/models/qwen/affinity", `{"affinity": false}`); code != http.StatusOK {
		t.Errorf("PUT affinity: %d", code)
	}
	if m.Affinity() {
		t.Error("affinity still on")
	}
	if code := mustPut(t, w.AdminToken(), base+"/api/v1/models/nope/affinity", `{"affinity": true}`); code != http.StatusNotFound {
		t.Errorf("unknown model: %d", code)
	}
	for _, bad := range []string{``, `{}`, `{"affinity": "yes"}`, `{"affinity": true, "x": 1}`, `not json`} {
		if code := mustPut(t, w.AdminToken(), base+"/api/v1/models/qwen/affinity", bad); code != http.StatusBadRequest {
			t.Errorf("body %q: %d, want 400", bad, code)
		}
	}

	var sess adminapi.SessionsResponse
	mustGetJSON(t, base+"/api/v1/sessions", &sess)
	if sess.Total != 1 || len(sess.Sessions) != 1 || len(sess.Sessions[0].Hash) != 16 || sess.Sessions[0].Turns != 1 {
		t.Errorf("sessions: %+v", sess)
	}
	if want := m.HashSession("s"); sess.Sessions[0].Hash != fmt.Sprintf("%016x", want) {
		t.Errorf("session hash %s, want %016x", sess.Sessions[0].Hash, want)
	}
}

func TestAdminMetricsExposeLmwardenNames(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 2})
	w := mustWarden(t, simModel("qwen", s, sim.ShapePorts))
	m := w.Models()[0]
	p, _ := m.Place(placement.Request{SessionID: "s", Now: time.Now()})
	mustSend(t, m, p, "s", 0)
	m.Place(placement.Request{Now: time.Now()})
	m.Place(placement.Request{PinnedHeader: "9", Now: time.Now()})

	fams := mustScrape(t, "http://"+w.AdminAddr())
	want := []string{
		"lmwarden_requests_total", "lmwarden_requests_vllm_decided_total", "lmwarden_in_flight", "lmwarden_replica_in_flight",
		"lmwarden_sessions_live", "lmwarden_replica_sessions", "lmwarden_sessions_expired_total",
		"lmwarden_invalid_pins_total",
		"lmwarden_unaffined_total", "lmwarden_session_requests_total", "lmwarden_sticky_ratio",
		"lmwarden_affinity", "lmwarden_spill_threshold", "lmwarden_placement_errors_total",
		"lmwarden_retries_total", "lmwarden_replica_info", "lmwarden_replica_healthy",
		"lmwarden_replica_poll_failures_total", "lmwarden_replica_running", "lmwarden_replica_waiting",
		"lmwarden_replica_kv_usage_ratio", "lmwarden_replica_prefix_hit_ratio", "lmwarden_replica_load",
		"lmwarden_time_to_first_byte_seconds", "lmwarden_request_duration_seconds", "lmwarden_admission_wait_seconds",
	}
	for _, n := range want {
		if _, ok := fams[n]; !ok {
			t.Errorf("metric %s missing", n)
		}
	}
	// The standard Go and process collectors are there too.
	for _, n := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_cpu_seconds_total", "process_open_fds", "process_resident_memory_bytes"} {
		if _, ok := fams[n]; !ok {
			t.Errorf("metric %s missing", n)
		}
	}
	own := 0
	for n := range fams {
		switch {
		case strings.HasPrefix(n, "lmwarden_"):
			own++
		case strings.HasPrefix(n, "go_"), strings.HasPrefix(n, "process_"):
		default:
			t.Errorf("unexpected metric %s", n)
		}
	}
	if own != len(allDescs)+1 { // and lmwarden_ready, a gauge of its own (health.go)
		t.Errorf("%d lmwarden_ families, %d described and lmwarden_ready", own, len(allDescs))
	}
	value := func(name string, labels map[string]string) float64 {
		for _, mt := range fams[name].GetMetric() {
			if labelsMatch(mt, labels) {
				return vllmmetrics.Value(mt)
			}
		}
		t.Errorf("%s%v not found", name, labels)
		return -1
	}
	if v := value("lmwarden_invalid_pins_total", map[string]string{"model": "qwen"}); v != 1 {
		t.Errorf("invalid pins %v", v)
	}
	// The request with an invalid pin has no session either: unaffined too.
	if v := value("lmwarden_unaffined_total", map[string]string{"model": "qwen"}); v != 2 {
		t.Errorf("unaffined %v", v)
	}
	if v := value("lmwarden_in_flight", map[string]string{"model": "qwen"}); v != 2 {
		t.Errorf("in flight %v", v)
	}
}

// Every family is there before the first request, with a series for each
// configured replica where it has a replica label, so that rate(),
// absent() and alerts see a zero instead of nothing.
func TestEveryFamilyIsPresentBeforeAnyRequest(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 3})
	w := mustWarden(t, simModel("qwen", s, sim.ShapePorts))
	fams := mustScrape(t, "http://"+w.AdminAddr())
	for _, d := range allDescs {
		name := descName(d)
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s missing before any request", name)
			continue
		}
		if !strings.Contains(d.String(), ",replica") {
			continue
		}
		replicas := map[string]bool{}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "replica" {
					replicas[l.GetValue()] = true
				}
			}
		}
		if len(replicas) != 3 {
			t.Errorf("%s: series for replicas %v, want 0, 1, 2", name, replicas)
		}
	}
}

func TestMetricsDocAndREADMEListEveryName(t *testing.T) {
	for _, path := range []string{filepath.Join("..", "docs", "metrics.md"), filepath.Join("..", "README.md")} {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range allDescs {
			name := descName(d)
			if !bytes.Contains(doc, []byte("`"+name+"`")) && !bytes.Contains(doc, []byte("`"+name+"{")) {
				t.Errorf("%s does not document %s", path, name)
			}
		}
	}
}

// descName reads the fqName out of a Desc's String form.
func descName(d *prometheus.Desc) string {
	s := d.String()
	i := strings.Index(s, `fqName: "`)
	s = s[i+len(`fqName: "`):]
	return s[:strings.IndexByte(s, '"')]
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func TestAdminShowsCostPredictionsOnlyForPoliciesUnderAdmission(t *testing.T) {
	s := mustSim(t, sim.ServerConfig{Replicas: 2})
	cost := simModel("qwen", s, sim.ShapePorts)
	cost.Policy = config.PolicyCost
	sticky := simModel("sticky", s, sim.ShapePorts)
	other := simModel("other", s, sim.ShapePorts)
	other.Policy = config.PolicyHash
	w := mustWarden(t, cost, sticky, other)
	m := w.Models()[0]
	p, err := m.Place(placement.Request{SessionID: "s", PromptBytes: 40_000, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + w.AdminAddr()

	var got adminapi.ModelStatus
	if code := mustGetJSON(t, base+"/api/v1/models/qwen", &got); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if got.Cost == nil || got.Cost.PromptTokens != 10_000 || got.Cost.Admission != string(config.AdmissionAuto) {
		t.Fatalf("cost = %+v, want the usual prompt of 10000 tokens and admission auto", got.Cost)
	}
	if a := got.Cost.AdmissionState; a.Engaged || a.Timeout != 60 || a.QueueMax != 256 || a.Quantum != 20 || a.WaitP95 != nil {
		t.Fatalf("admission state %+v, want off (nothing overloaded), the defaults and no wait yet", a)
	}
	for i, r := range got.Replicas {
		if r.Cost == nil || r.Cost.PredictedTTFT <= 0 || r.Cost.Capacity <= 0 || r.Cost.Budget != r.Cost.Capacity {
			t.Fatalf("replica %d cost = %+v, want a predicted TTFT, a capacity and a live budget of all of it (fill 1)", i, r.Cost)
		}
	}
	// the replica with the request in flight predicts a longer wait
	if busy, idle := got.Replicas[p.Replica].Cost, got.Replicas[1-p.Replica].Cost; busy.PredictedTTFT <= idle.PredictedTTFT || busy.Live == 0 {
		t.Fatalf("busy replica %+v, idle %+v: want the busy one slower and holding live context", busy, idle)
	}

	// sticky runs under admission too: its block says so
	var st adminapi.ModelStatus
	mustGetJSON(t, base+"/api/v1/models/sticky", &st)
	if st.Cost == nil || st.Cost.Admission != string(config.AdmissionAuto) {
		t.Fatalf("policy sticky: cost = %+v, want its admission block (auto)", st.Cost)
	}
	var raw map[string]any
	mustGetJSON(t, base+"/api/v1/models/other", &raw)
	if _, ok := raw["cost"]; ok {
		t.Fatalf("policy hash shows a cost block: %v", raw["cost"])
	}
	m.Done(p, time.Now())
}
