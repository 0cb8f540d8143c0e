package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/lmwarden/lmwarden/agent/placement"
)

// vLLM metric names, newest generation first. prometheus_client (Python)
// writes a counter's family as name_total in the text format, other
// exporters as name; both spellings are looked up.
var (
	namesRunning       = []string{"vllm:num_requests_running"}
	namesWaiting       = []string{"vllm:num_requests_waiting"}
	namesKVUsage       = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	namesPrefixQueries = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
	namesPrefixHits    = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	namesPromptTokens  = []string{"vllm:prompt_tokens_total", "vllm:prompt_tokens"}
	namesGenTokens     = []string{"vllm:generation_tokens_total", "vllm:generation_tokens"}
	namesTTFT          = []string{"vllm:time_to_first_token_seconds"}
	namesCacheConfig   = []string{"vllm:cache_config_info"}
)

// scrapeAccept asks for the classic text format (what vLLM serves); the
// response's Content-Type still decides how it is parsed.
const scrapeAccept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// maxScrapeBytes bounds one /metrics body (vLLM's is tens of KiB).
const maxScrapeBytes = 16 << 20

// scrapeHealth reads base/health: any 2xx is healthy.
func scrapeHealth(ctx context.Context, c *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%w: GET /health: %w", ErrScrape, transportErr(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: GET /health: HTTP %s", ErrScrape, resp.Status)
	}
	return nil
}

// scrapeMetrics reads and parses base/metrics with expfmt, negotiating the
// format by Accept and Content-Type.
func scrapeMetrics(ctx context.Context, c *http.Client, base string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", scrapeAccept)
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET /metrics: %w", ErrScrape, transportErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET /metrics: HTTP %s", ErrScrape, resp.Status)
	}
	return ParseMetrics(io.LimitReader(resp.Body, maxScrapeBytes), resp.Header)
}

// ParseMetrics decodes a Prometheus exposition with expfmt in the format
// its header names; an unknown or missing Content-Type is read as the
// classic text format. The bench reads replicas' /metrics with it too.
func ParseMetrics(r io.Reader, h http.Header) (map[string]*dto.MetricFamily, error) {
	format := expfmt.ResponseFormat(h)
	if format.FormatType() == expfmt.TypeUnknown {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(r, format)
	fams := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return fams, nil
			}
			return nil, fmt.Errorf("%w: %v", ErrScrape, err)
		}
		fams[mf.GetName()] = &mf
	}
}

// replicaMetricsFrom extracts the numbers placement needs. perEngine: the
// one-endpoint shape, where series carry an `engine` label naming the DP
// rank; out has one entry per rank and series without an engine label count
// for rank 0. Otherwise every series sums into out[0] (a replica's own
// /metrics), except KV usage, which is averaged.
func replicaMetricsFrom(fams map[string]*dto.MetricFamily, perEngine bool, out []placement.ReplicaMetrics) {
	for i := range out {
		out[i] = placement.ReplicaMetrics{Healthy: true}
	}
	slot := func(m *dto.Metric) int {
		if !perEngine {
			return 0
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "engine" {
				if e, err := strconv.Atoi(l.GetValue()); err == nil && e >= 0 && e < len(out) {
					return e
				}
				return -1
			}
		}
		return 0
	}
	each := func(names []string, fn func(i int, m *dto.Metric)) {
		for _, n := range names {
			mf, ok := fams[n]
			if !ok {
				continue
			}
			for _, m := range mf.GetMetric() {
				if i := slot(m); i >= 0 {
					fn(i, m)
				}
			}
			return // the first generation found wins
		}
	}
	each(namesRunning, func(i int, m *dto.Metric) { out[i].Running += sampleValue(m) })
	each(namesWaiting, func(i int, m *dto.Metric) { out[i].Waiting += sampleValue(m) })
	kvN := make([]int, len(out))
	each(namesKVUsage, func(i int, m *dto.Metric) { out[i].KVUsage += sampleValue(m); kvN[i]++ })
	for i := range out {
		if kvN[i] > 1 {
			out[i].KVUsage /= float64(kvN[i])
		}
	}
	each(namesPrefixQueries, func(i int, m *dto.Metric) { out[i].PrefixQueries += sampleValue(m) })
	each(namesPrefixHits, func(i int, m *dto.Metric) { out[i].PrefixHits += sampleValue(m) })
	each(namesPromptTokens, func(i int, m *dto.Metric) { out[i].PromptTokens += sampleValue(m) })
	each(namesGenTokens, func(i int, m *dto.Metric) { out[i].GenerationTokens += sampleValue(m) })
	each(namesTTFT, func(i int, m *dto.Metric) {
		if h := m.GetHistogram(); h != nil {
			out[i].TTFTSum += h.GetSampleSum()
			out[i].TTFTCount += float64(h.GetSampleCount())
		}
	})
	each(namesCacheConfig, func(i int, m *dto.Metric) {
		var blocks, size float64
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "num_gpu_blocks":
				blocks, _ = strconv.ParseFloat(l.GetValue(), 64)
			case "block_size":
				size, _ = strconv.ParseFloat(l.GetValue(), 64)
			}
		}
		out[i].KVCapacityTokens += blocks * size
	})
}

// sampleValue reads a gauge, counter or untyped sample.
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
