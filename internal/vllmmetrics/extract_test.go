package vllmmetrics

import (
	"net/http"
	"strings"
	"testing"
)

// An exposition with two generations of the prefix-cache counters: the
// newer one wins, and the two are never added.
const mixed = `# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 20
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 1000
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="2500"} 1
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 2
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4
`

func TestFindTakesTheNewestGenerationPresent(t *testing.T) {
	fams, err := Parse(strings.NewReader(mixed), http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	engines := ""
	for _, m := range Find(fams, PrefixHits).GetMetric() {
		sum += Value(m)
		engines += Engine(m)
	}
	if sum != 30 || engines != "01" {
		t.Fatalf("prefix hits %v on engines %q, want 30 on 01", sum, engines)
	}
	if got := Find(fams, Running).GetMetric(); len(got) != 0 {
		t.Fatalf("a family the exposition lacks: %v", got)
	}
}

func TestCacheConfigAndHistogramAreRead(t *testing.T) {
	fams, err := Parse(strings.NewReader(mixed), http.Header{"Content-Type": {"text/plain; version=0.0.4"}})
	if err != nil {
		t.Fatal(err)
	}
	cc := Find(fams, CacheConfig).GetMetric()[0]
	if got := ReadCacheConfig(cc); got != (CacheConfigOf{BlockSize: 16, NumGPUBlocks: 2500, GPUMemoryUtilization: 0.9}) {
		t.Errorf("cache config %+v", got)
	}
	if got := KVCapacityTokens(cc); got != 40000 {
		t.Errorf("KV capacity %v tokens, want 40000", got)
	}
	if sum, count := Histogram(Find(fams, TTFT).GetMetric()[0]); sum != 2 || count != 4 {
		t.Errorf("TTFT sum %v count %v, want 2 and 4", sum, count)
	}
}

func TestParseRefusesABrokenExposition(t *testing.T) {
	if _, err := Parse(strings.NewReader("vllm:num_requests_running{engine=\"0\" 1\n"), http.Header{}); err == nil {
		t.Fatal("a broken exposition parsed")
	}
}
