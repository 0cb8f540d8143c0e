package bench

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/sim"
)

func TestPollerFindsEveryRankBehindOneEndpoint(t *testing.T) {
	s := mustSim(t, 3, sim.ShapeRanks, 50)
	p := &metricsPoller{client: http.DefaultClient, sources: []metricsSource{{url: metricsURL(s.URLs()[0])}}}
	if err := p.discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(p.keys) != 3 {
		t.Fatalf("found %d replicas behind one endpoint, want 3 (engine label): %v", len(p.keys), p.keys)
	}
	for i, k := range p.keys {
		if k.engine != string(rune('0'+i)) {
			t.Fatalf("replica %d has engine %q: ranks out of order", i, k.engine)
		}
	}
	for _, x := range p.poll(context.Background()) {
		if x == nil {
			t.Fatal("a rank could not be read")
		}
	}
}

func TestParserReadsBothCounterSpellingsAndOldNames(t *testing.T) {
	const exposition = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries{engine="0",model_name="m"} 1000
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits{engine="0",model_name="m"} 250
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2500"} 1
`
	got, err := parseReplicaMetrics(strings.NewReader(exposition), http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	s := got["0"]
	if s == nil || s.Running != 2 || s.PrefixQueries != 1000 || s.PrefixHits != 250 || s.RequestsDone != 7 || s.KVCapacity != 40000 {
		t.Fatalf("parsed %+v", s)
	}
	if _, err := parseReplicaMetrics(strings.NewReader("# TYPE other gauge\nother 1\n"), http.Header{}); err == nil {
		t.Fatal("an exposition without vLLM series was accepted")
	}
}

func TestProgressWritesOneLinePerStepWhenNotATerminal(t *testing.T) {
	var b strings.Builder
	p := NewProgress(&b, 2)
	p.Begin(Step{Sessions: 4}, "off")
	p.Update(0.5)
	p.End("hit 50%")
	p.Begin(Step{Sessions: 4}, "on")
	p.End("hit 80%")
	p.Finish()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "4 sessions, arm off: hit 50%") || strings.Contains(b.String(), "\r") {
		t.Fatalf("progress on a pipe wrote:\n%q", b.String())
	}
}
