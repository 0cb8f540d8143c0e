package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/agent"
)

// vLLM's metric names, newest generation first. prometheus_client (Python)
// writes a counter's family as name_total, other exporters as name.
var (
	metricRunning   = []string{"vllm:num_requests_running"}
	metricWaiting   = []string{"vllm:num_requests_waiting"}
	metricQueries   = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
	metricHits      = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	metricRequests  = []string{"vllm:request_success_total", "vllm:request_success"}
	metricGenerated = []string{"vllm:generation_tokens_total", "vllm:generation_tokens"}
	// the KV cache's size, as labels of an info gauge
	metricCacheConfig = []string{"vllm:cache_config_info"}
)

// metricsSource is one /metrics URL; it may hold several replicas (the
// one-endpoint shape labels each DP rank's series with `engine`).
type metricsSource struct {
	url string
}

// scrape reads one /metrics and returns a sample per engine label ("" when
// the series carry none), summing series that differ in other labels.
func (s metricsSource) scrape(ctx context.Context, c *http.Client) (map[string]*replicaSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", s.url, resp.Status)
	}
	return parseReplicaMetrics(io.LimitReader(resp.Body, 16<<20), resp.Header)
}

// parseReplicaMetrics decodes an exposition with expfmt in the format its
// header names (classic text when unknown).
func parseReplicaMetrics(r io.Reader, h http.Header) (map[string]*replicaSample, error) {
	fams, err := agent.ParseMetrics(r, h)
	if err != nil {
		return nil, err
	}
	out := map[string]*replicaSample{}
	each := func(names []string, add func(s *replicaSample, v float64)) {
		for _, n := range names {
			mf, ok := fams[n]
			if !ok {
				continue
			}
			for _, m := range mf.GetMetric() {
				e := engineLabel(m)
				if out[e] == nil {
					out[e] = &replicaSample{}
				}
				add(out[e], metricValue(m))
			}
			return // the first generation found wins
		}
	}
	each(metricRunning, func(s *replicaSample, v float64) { s.Running += v })
	each(metricWaiting, func(s *replicaSample, v float64) { s.Waiting += v })
	each(metricQueries, func(s *replicaSample, v float64) { s.PrefixQueries += v })
	each(metricHits, func(s *replicaSample, v float64) { s.PrefixHits += v })
	each(metricRequests, func(s *replicaSample, v float64) { s.RequestsDone += v })
	each(metricGenerated, func(s *replicaSample, v float64) { s.GenerationTokens += v })
	for _, mf := range fams[metricCacheConfig[0]].GetMetric() {
		if s := out[engineLabel(mf)]; s != nil {
			s.KVCapacity += kvCapacityTokens(mf)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no vLLM series (vllm:num_requests_running) in the exposition", ErrNoReplicas)
	}
	return out, nil
}

// kvCapacityTokens is num_gpu_blocks × block_size of a cache_config_info
// series (0 when either label is missing).
func kvCapacityTokens(m *dto.Metric) float64 {
	var blocks, size float64
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "num_gpu_blocks":
			blocks, _ = strconv.ParseFloat(l.GetValue(), 64)
		case "block_size":
			size, _ = strconv.ParseFloat(l.GetValue(), 64)
		}
	}
	return blocks * size
}

func engineLabel(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "engine" {
			return l.GetValue()
		}
	}
	return ""
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// replicaKey names one replica: its metrics URL and engine label.
type replicaKey struct {
	url, engine string
}

// metricsPoller reads every source and maps the series to a fixed list of
// replicas, discovered at the first successful poll and kept for the run
// (a replica missing later is reported as nil, not renumbered).
type metricsPoller struct {
	client  *http.Client
	sources []metricsSource
	keys    []replicaKey
}

// discover polls once and fixes the replica list: the sources in the order
// given, each source's engines by label (numerically for numbers).
func (p *metricsPoller) discover(ctx context.Context) error {
	var keys []replicaKey
	var errs []error
	for _, s := range p.sources {
		got, err := s.scrape(ctx, p.client)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		engines := make([]string, 0, len(got))
		for e := range got {
			engines = append(engines, e)
		}
		sort.Slice(engines, func(a, b int) bool {
			if len(engines[a]) != len(engines[b]) {
				return len(engines[a]) < len(engines[b])
			}
			return engines[a] < engines[b]
		})
		for _, e := range engines {
			keys = append(keys, replicaKey{s.url, e})
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %v", ErrNoReplicas, errors.Join(errs...))
	}
	if len(keys) == 0 {
		return ErrNoReplicas
	}
	p.keys = keys
	return nil
}

// poll returns one sample per replica (nil for a replica that could not be
// read this time).
func (p *metricsPoller) poll(ctx context.Context) []*replicaSample {
	out := make([]*replicaSample, len(p.keys))
	byURL := map[string]map[string]*replicaSample{}
	// Every source at once, each within scrapeTimeout: a replica that
	// stopped answering (a host gone from the network) must neither stall
	// the others' samples nor the end of the run.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range p.sources {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
			got, err := s.scrape(sctx, p.client)
			cancel()
			if err == nil {
				mu.Lock()
				byURL[s.url] = got
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, k := range p.keys {
		out[i] = byURL[k.url][k.engine]
	}
	return out
}

// scrapeTimeout bounds one read of a replica's /metrics.
const scrapeTimeout = 2 * time.Second

// metricsURL turns a replica base URL into its /metrics URL.
func metricsURL(u string) string {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		u = u[:i]
	}
	u = strings.TrimRight(u, "/")
	if strings.HasSuffix(u, "/metrics") {
		return u
	}
	return u + "/metrics"
}
