package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
)

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
	req.Header.Set("Accept", vllmmetrics.Accept)
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET /metrics: %w", ErrScrape, transportErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET /metrics: HTTP %s", ErrScrape, resp.Status)
	}
	fams, err := vllmmetrics.Parse(io.LimitReader(resp.Body, vllmmetrics.MaxBytes), resp.Header)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrScrape, err)
	}
	return fams, nil
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
		if v, ok := vllmmetrics.Label(m, vllmmetrics.LabelEngine); ok {
			if e, err := strconv.Atoi(v); err == nil && e >= 0 && e < len(out) {
				return e
			}
			return -1
		}
		return 0
	}
	each := func(names []string, fn func(i int, m *dto.Metric)) {
		for _, m := range vllmmetrics.Find(fams, names).GetMetric() {
			if i := slot(m); i >= 0 {
				fn(i, m)
			}
		}
	}
	each(vllmmetrics.Running, func(i int, m *dto.Metric) { out[i].Running += vllmmetrics.Value(m) })
	each(vllmmetrics.Waiting, func(i int, m *dto.Metric) { out[i].Waiting += vllmmetrics.Value(m) })
	kvN := make([]int, len(out))
	each(vllmmetrics.KVUsage, func(i int, m *dto.Metric) { out[i].KVUsage += vllmmetrics.Value(m); kvN[i]++ })
	for i := range out {
		if kvN[i] > 1 {
			out[i].KVUsage /= float64(kvN[i])
		}
	}
	each(vllmmetrics.PrefixQueries, func(i int, m *dto.Metric) { out[i].PrefixQueries += vllmmetrics.Value(m) })
	each(vllmmetrics.PrefixHits, func(i int, m *dto.Metric) { out[i].PrefixHits += vllmmetrics.Value(m) })
	each(vllmmetrics.PromptTokens, func(i int, m *dto.Metric) { out[i].PromptTokens += vllmmetrics.Value(m) })
	each(vllmmetrics.GenerationTokens, func(i int, m *dto.Metric) { out[i].GenerationTokens += vllmmetrics.Value(m) })
	each(vllmmetrics.TTFT, func(i int, m *dto.Metric) {
		sum, count := vllmmetrics.Histogram(m)
		out[i].TTFTSum += sum
		out[i].TTFTCount += count
	})
	each(vllmmetrics.CacheConfig, func(i int, m *dto.Metric) { out[i].KVCapacityTokens += vllmmetrics.KVCapacityTokens(m) })
}
