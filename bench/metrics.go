package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
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
	req.Header.Set("Accept", vllmmetrics.Accept)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", s.url, resp.Status)
	}
	return parseReplicaMetrics(io.LimitReader(resp.Body, vllmmetrics.MaxBytes), resp.Header)
}

// parseReplicaMetrics decodes an exposition with expfmt in the format its
// header names (classic text when unknown).
func parseReplicaMetrics(r io.Reader, h http.Header) (map[string]*replicaSample, error) {
	fams, err := vllmmetrics.Parse(r, h)
	if err != nil {
		return nil, err
	}
	out := map[string]*replicaSample{}
	each := func(names []string, add func(s *replicaSample, v float64)) {
		for _, m := range vllmmetrics.Find(fams, names).GetMetric() {
			e := vllmmetrics.Engine(m)
			if out[e] == nil {
				out[e] = &replicaSample{}
			}
			add(out[e], vllmmetrics.Value(m))
		}
	}
	each(vllmmetrics.Running, func(s *replicaSample, v float64) { s.Running += v })
	each(vllmmetrics.Waiting, func(s *replicaSample, v float64) { s.Waiting += v })
	each(vllmmetrics.PrefixQueries, func(s *replicaSample, v float64) { s.PrefixQueries += v })
	each(vllmmetrics.PrefixHits, func(s *replicaSample, v float64) { s.PrefixHits += v })
	each(vllmmetrics.RequestSuccess, func(s *replicaSample, v float64) { s.RequestsDone += v })
	each(vllmmetrics.GenerationTokens, func(s *replicaSample, v float64) { s.GenerationTokens += v })
	// the cache's size only for replicas that export load: an info series
	// alone is no replica
	for _, m := range fams[vllmmetrics.CacheConfig[0]].GetMetric() {
		if s := out[vllmmetrics.Engine(m)]; s != nil {
			s.KVCapacity += vllmmetrics.KVCapacityTokens(m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no vLLM series (%s) in the exposition", ErrNoReplicas, vllmmetrics.Running[0])
	}
	return out, nil
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
