package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
)

// Two generations of vLLM's exposition (text format, as prometheus_client
// writes it). The old one has gpu_ names; the new one has the engine label
// of the one-endpoint shape.
const oldGenerationMetrics = `# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="qwen"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="qwen"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="qwen"} 0.5
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="qwen"} 1000.0
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="qwen"} 250.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="qwen"} 1000.0
`

const perEngineMetrics = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 2.0
vllm:num_requests_running{engine="1",model_name="qwen"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 0.0
vllm:num_requests_waiting{engine="1",model_name="qwen"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.75
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 100.0
vllm:prefix_cache_queries_total{engine="1",model_name="qwen"} 200.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 10.0
vllm:prefix_cache_hits_total{engine="1",model_name="qwen"} 150.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2500"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="2500"} 1.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen"} 4.0
`

func TestScrapeReadsOldMetricNames(t *testing.T) {
	h := http.Header{"Content-Type": {"text/plain; version=0.0.4; charset=utf-8"}}
	fams, err := vllmmetrics.Parse(strings.NewReader(oldGenerationMetrics), h)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]placement.ReplicaMetrics, 1)
	replicaMetricsFrom(fams, false, out)
	got := out[0]
	if got.Running != 3 || got.Waiting != 1 || got.KVUsage != 0.5 || got.PrefixQueries != 1000 || got.PrefixHits != 250 || got.PromptTokens != 1000 {
		t.Errorf("%+v", got)
	}
}

func TestScrapeSplitsRanksByEngineLabel(t *testing.T) {
	fams, err := vllmmetrics.Parse(strings.NewReader(perEngineMetrics), http.Header{}) // no Content-Type: text
	if err != nil {
		t.Fatal(err)
	}
	out := make([]placement.ReplicaMetrics, 2)
	replicaMetricsFrom(fams, true, out)
	if out[0].Running != 2 || out[1].Running != 5 || out[1].Waiting != 4 || out[0].KVUsage != 0.25 || out[1].PrefixHits != 150 {
		t.Errorf("%+v", out)
	}
	if out[0].KVCapacityTokens != 40000 || out[0].TTFTCount != 4 || out[0].TTFTSum != 2 {
		t.Errorf("cache config / ttft: %+v", out[0])
	}
	// Per-replica shape: everything sums into one replica, KV averaged.
	one := make([]placement.ReplicaMetrics, 1)
	replicaMetricsFrom(fams, false, one)
	if one[0].Running != 7 || one[0].KVUsage != 0.5 {
		t.Errorf("%+v", one[0])
	}
}

func TestScrapeNegotiatesOverHTTP(t *testing.T) {
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write([]byte(perEngineMetrics))
	}))
	defer srv.Close()
	fams, err := scrapeMetrics(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(accept, "text/plain") {
		t.Errorf("Accept %q", accept)
	}
	if _, ok := fams["vllm:num_requests_running"]; !ok {
		t.Errorf("families: %v", fams)
	}
}
