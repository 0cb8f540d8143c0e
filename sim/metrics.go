package sim

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
)

// ttftBuckets are vLLM's buckets for time to first token.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
	1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

// itlBuckets are vLLM's buckets for the time between output tokens.
var itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
	1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}

var engineLabels = []string{vllmmetrics.LabelModel, vllmmetrics.LabelEngine}

// replicaCollector exports the engines behind one listener: in the ports
// shape one engine labelled engine="0" (an independent vllm serve), in the
// ranks shape every rank labelled with its index.
type replicaCollector struct {
	p        *pacer
	model    string
	profile  Profile
	replicas []int    // engine indexes exported
	labels   []string // their engine label values

	running, waiting, kvUsage                     *prometheus.Desc
	queries, hits, prompt, generation, preemption *prometheus.Desc
	cacheConfig                                   *prometheus.Desc
}

// newReplicaRegistry exports vLLM's series (vllm/v1/metrics/loggers.py):
// names from package vllmmetrics (the first, current, one of each list),
// types, label names and HELP strings as vLLM writes them. Counters carry
// the _total suffix that prometheus_client adds on the wire.
func newReplicaRegistry(p *pacer, model string, profile Profile, replicas []int, labels []string) *prometheus.Registry {
	c := &replicaCollector{
		p: p, model: model, profile: profile, replicas: replicas, labels: labels,
		running:     prometheus.NewDesc(vllmmetrics.Running[0], "Number of requests in model execution batches.", engineLabels, nil),
		waiting:     prometheus.NewDesc(vllmmetrics.Waiting[0], "Number of requests waiting to be processed.", engineLabels, nil),
		kvUsage:     prometheus.NewDesc(vllmmetrics.KVUsage[0], "KV-cache usage. 1 means 100 percent usage.", engineLabels, nil),
		queries:     prometheus.NewDesc(vllmmetrics.PrefixQueries[0], "Prefix cache queries, in terms of number of queried tokens.", engineLabels, nil),
		hits:        prometheus.NewDesc(vllmmetrics.PrefixHits[0], "Prefix cache hits, in terms of number of cached tokens.", engineLabels, nil),
		prompt:      prometheus.NewDesc(vllmmetrics.PromptTokens[0], "Number of prefill tokens processed.", engineLabels, nil),
		generation:  prometheus.NewDesc(vllmmetrics.GenerationTokens[0], "Number of generation tokens processed.", engineLabels, nil),
		preemption:  prometheus.NewDesc(vllmmetrics.Preemptions[0], "Cumulative number of preemption from the engine.", engineLabels, nil),
		cacheConfig: prometheus.NewDesc(vllmmetrics.CacheConfig[0], "Information of the LLMCache", cacheConfigLabels, nil),
	}
	ttft := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: vllmmetrics.TTFT[0], Help: "Histogram of time to first token in seconds.", Buckets: ttftBuckets,
	}, engineLabels)
	itl := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: vllmmetrics.ITL[0], Help: "Histogram of inter-token latency in seconds.", Buckets: itlBuckets,
	}, engineLabels)
	p.read(func(v *Virtual) {
		for k, i := range replicas {
			v.engines[i].onTTFT = ttft.WithLabelValues(model, labels[k]).Observe
			v.engines[i].onITL = itl.WithLabelValues(model, labels[k]).Observe
		}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, ttft, itl)
	return reg
}

// cacheConfigLabels are the CacheConfig fields vLLM exports as labels; the
// placement reads num_gpu_blocks and block_size for capacity.
var cacheConfigLabels = []string{vllmmetrics.LabelBlockSize, "cache_dtype", "enable_prefix_caching",
	vllmmetrics.LabelGPUMemoryUtilization, "num_cpu_blocks", vllmmetrics.LabelNumGPUBlocks, vllmmetrics.LabelEngine}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.kvUsage, c.queries, c.hits,
		c.prompt, c.generation, c.preemption, c.cacheConfig} {
		ch <- d
	}
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	stats := make([]Stats, len(c.replicas))
	c.p.read(func(v *Virtual) {
		for k, i := range c.replicas {
			stats[k] = v.Stats(i)
		}
	})
	for k, st := range stats {
		l := []string{c.model, c.labels[k]}
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(st.Running), l...)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting), l...)
		ch <- prometheus.MustNewConstMetric(c.kvUsage, prometheus.GaugeValue, st.KVUsage, l...)
		ch <- prometheus.MustNewConstMetric(c.queries, prometheus.CounterValue, float64(st.PrefixQueries), l...)
		ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(st.PrefixHits), l...)
		ch <- prometheus.MustNewConstMetric(c.prompt, prometheus.CounterValue, float64(st.PromptTokens), l...)
		ch <- prometheus.MustNewConstMetric(c.generation, prometheus.CounterValue, float64(st.GenerationTokens), l...)
		ch <- prometheus.MustNewConstMetric(c.preemption, prometheus.CounterValue, float64(st.Preemptions), l...)
		ch <- prometheus.MustNewConstMetric(c.cacheConfig, prometheus.GaugeValue, 1,
			strconv.Itoa(c.profile.BlockSize), "auto", "True",
			strconv.FormatFloat(c.profile.GPUMemoryUtilization, 'g', -1, 64), "0",
			strconv.Itoa(c.profile.NumBlocks()), c.labels[k])
	}
}
