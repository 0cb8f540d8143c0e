package picker

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// counters are the picker's own event counts (atomic: the pick path
// updates them without a lock).
type counters struct {
	streams        atomic.Uint64
	picked         atomic.Uint64
	noEndpoint     atomic.Uint64
	shed           atomic.Uint64
	servedFallback atomic.Uint64
	servedUnknown  atomic.Uint64
	spoeFrames     atomic.Uint64
}

// The picker's families (docs/multihost.md and docs/metrics.md list each;
// a test keeps them in step). Per-host series carry the host's endpoint.
var (
	descBuild   = prometheus.NewDesc("lmwarden_build_info", "The running build: constant 1.", []string{"version", "revision", "goversion"}, nil)
	descStreams = prometheus.NewDesc("lmwarden_picker_streams_total", "ext_proc streams the gateway opened (one per HTTP request).", nil, nil)
	descPicks   = prometheus.NewDesc("lmwarden_picker_picks_total", "Picks by outcome: picked, no_endpoint (answered 503), shed (answered 429).", []string{"outcome"}, nil)
	descServed  = prometheus.NewDesc("lmwarden_picker_served_total", "Served-endpoint reports that were not the pick: fallback (a later endpoint of the list served; the conversation moved there), unknown (not a host of this picker).", []string{"outcome"}, nil)
	descSPOE    = prometheus.NewDesc("lmwarden_picker_spoe_frames_total", "HAProxy SPOE frames the agent answered.", nil, nil)
	descHealthy = prometheus.NewDesc("lmwarden_picker_host_healthy", "1 while the host takes placements (its warden answers, is ready, has a ready replica).", []string{"host"}, nil)
	descReady   = prometheus.NewDesc("lmwarden_picker_host_ready_replicas", "The host's replicas of the model that are healthy, as its warden last said.", []string{"host"}, nil)
	descRunning = prometheus.NewDesc("lmwarden_picker_host_running", "Requests running on the host's ready replicas (vLLM's own count, summed), as last polled.", []string{"host"}, nil)
	descWaiting = prometheus.NewDesc("lmwarden_picker_host_waiting", "Requests waiting on the host's ready replicas, summed, as last polled.", []string{"host"}, nil)
	descKV      = prometheus.NewDesc("lmwarden_picker_host_kv_used", "KV cache use of the host's ready replicas, summed (a host of 4 full replicas is 4).", []string{"host"}, nil)
	descLoad    = prometheus.NewDesc("lmwarden_picker_host_load", "The host's load as placement weighs it (docs/placement.md's load(r), over the host).", []string{"host"}, nil)
	descInFl    = prometheus.NewDesc("lmwarden_picker_host_in_flight", "Requests the picker placed on the host whose stream has not ended.", []string{"host"}, nil)
	descSess    = prometheus.NewDesc("lmwarden_picker_host_sessions", "Conversations the picker keeps on the host.", []string{"host"}, nil)
	descReqs    = prometheus.NewDesc("lmwarden_picker_host_requests_total", "Requests placed on the host, by how (placement kinds of docs/metrics.md: new, sticky, spilled, repinned, ...).", []string{"host", "kind"}, nil)
	descPollF   = prometheus.NewDesc("lmwarden_picker_host_poll_failures_total", "Polls of the host's warden that failed (no answer in time, an error status, an answer that does not parse).", []string{"host"}, nil)
	descLearned = prometheus.NewDesc("lmwarden_picker_host_sessions_learned_total", "Conversations learned from the host's session list (a restarted picker, another front tier).", []string{"host"}, nil)
)

var pickerDescs = []*prometheus.Desc{descBuild, descStreams, descPicks, descServed, descSPOE, descHealthy, descReady,
	descRunning, descWaiting, descKV, descLoad, descInFl, descSess, descReqs, descPollF, descLearned}

// Collector exports the picker's families.
type Collector struct {
	reg   *Registry
	build adminapi.BuildInfo
}

// NewCollector exports reg's state.
func NewCollector(reg *Registry, build adminapi.BuildInfo) *Collector {
	return &Collector{reg: reg, build: build}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range pickerDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.reg.stats
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge(descBuild, 1, c.build.Version, c.build.Revision, c.build.GoVersion)
	counter(descStreams, s.streams.Load())
	counter(descPicks, s.picked.Load(), "picked")
	counter(descPicks, s.noEndpoint.Load(), "no_endpoint")
	counter(descPicks, s.shed.Load(), "shed")
	counter(descServed, s.servedFallback.Load(), "fallback")
	counter(descServed, s.servedUnknown.Load(), "unknown")
	counter(descSPOE, s.spoeFrames.Load())
	hosts, st := c.reg.snapshot()
	for i, h := range hosts {
		ep := h.Endpoint
		healthy := 0.0
		if h.Healthy {
			healthy = 1
		}
		gauge(descHealthy, healthy, ep)
		gauge(descReady, float64(h.Load.Ready), ep)
		gauge(descRunning, h.Load.Running, ep)
		gauge(descWaiting, h.Load.Waiting, ep)
		gauge(descKV, h.Load.KVUsed, ep)
		counter(descPollF, h.Failed, ep)
		counter(descLearned, h.SessionsLearned, ep)
		if i < len(st.Replicas) {
			rep := st.Replicas[i]
			gauge(descLoad, rep.Load, ep)
			gauge(descInFl, float64(rep.InFlight), ep)
			gauge(descSess, float64(rep.Sessions), ep)
			for kind, n := range rep.Requests {
				counter(descReqs, n, ep, kind)
			}
		}
	}
}
