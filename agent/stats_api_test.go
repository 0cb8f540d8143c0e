package agent

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

func TestStatsAPICapsWindowAtAnHour(t *testing.T) {
	srv := mustStatsServer(t, NewTokenSeries(10*time.Second))
	for _, window := range []string{"", "1h", "3h"} {
		resp := mustGetStats(t, srv.URL+"/api/v1/stats?window="+window)
		if resp.WindowSeconds != 3600 || resp.StepSeconds != 10 {
			t.Errorf("window=%q: window %v s, step %v s; want 3600 s, 10 s", window, resp.WindowSeconds, resp.StepSeconds)
		}
	}
	if resp := mustGetStats(t, srv.URL+"/api/v1/stats?window=5m"); resp.WindowSeconds != 300 {
		t.Errorf("window=5m: window %v s, want 300", resp.WindowSeconds)
	}
}

func TestStatsAPIRefusesBadWindow(t *testing.T) {
	srv := mustStatsServer(t, NewTokenSeries(10*time.Second))
	for _, window := range []string{"soon", "-5m", "0s", "10"} {
		resp, err := http.Get(srv.URL + "/api/v1/stats?window=" + window)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("window=%q: status %d, want 400", window, resp.StatusCode)
		}
	}
}

func TestStatsAPIServesObservedTraffic(t *testing.T) {
	// The poll interval lies inside one 10 s slot or straddles two; the
	// summary must be the same either way (CI once caught 799.9999999999999
	// queries from a straddling poll).
	slot := time.Now().Add(-time.Minute).Truncate(10 * time.Second)
	for _, offset := range []time.Duration{2 * time.Second, 9*time.Second + 300*time.Millisecond, 9*time.Second + 999*time.Millisecond} {
		ts := NewTokenSeries(10 * time.Second)
		start := slot.Add(offset)
		ts.Observe("qwen", 0, TokenCounters{}, start)
		ts.Observe("qwen", 0, TokenCounters{PromptTokens: 800, PrefixQueries: 800, PrefixHits: 600, GenerationTokens: 50}, start.Add(time.Second))
		srv := mustStatsServer(t, ts)

		resp := mustGetStats(t, srv.URL+"/api/v1/stats?window=1h")
		if len(resp.Models) != 1 || resp.Models[0].Name != "qwen" || len(resp.Models[0].Replicas) != 1 {
			t.Fatalf("offset %v: models = %+v, want one model qwen with one replica", offset, resp.Models)
		}
		s := resp.Models[0].Pooled.Summary
		if !near(s.PromptCachedTokens, 600) || !near(s.PromptComputedTokens, 200) || !near(s.CompletionTokens, 50) || s.HitRate == nil || !near(*s.HitRate, 0.75) {
			t.Errorf("offset %v: summary = %+v, want 600 cached, 200 computed, 50 completion, hit rate 0.75", offset, s)
		}
	}
}

// near compares sums of split float shares: equal to a part in 10^9.
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

func mustStatsServer(tb testing.TB, ts *TokenSeries) *httptest.Server {
	tb.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/stats", StatsHandler(ts))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

func mustGetStats(tb testing.TB, url string) adminapi.StatsResponse {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: status %d", url, resp.StatusCode)
	}
	var out adminapi.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	return out
}
