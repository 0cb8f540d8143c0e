package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// Every Prometheus metric the warden exports, in one place; docs/metrics.md
// documents each. They are read from the models' own counters at scrape
// time (a custom Collector), so the placement path never touches
// client_golang. Labels: model = model name, replica = replica index (the
// URL is in lmwarden_replica_info), kind = placement kind.
var (
	descBuildInfo = prometheus.NewDesc("lmwarden_build_info",
		"Constant 1; the labels say which build runs (lmwarden --version).",
		[]string{"version", "revision", "goversion"}, nil)
	descRequests = prometheus.NewDesc("lmwarden_requests_total",
		"Requests placed, by replica and placement kind (new, sticky, spilled, client_pinned, unaffined, balanced, repinned, fresh).",
		[]string{"model", "replica", "kind"}, nil)
	descVLLMDecided = prometheus.NewDesc("lmwarden_requests_vllm_decided_total",
		"Requests forwarded without a rank header for vLLM to place (affinity off, one-endpoint shape).",
		[]string{"model"}, nil)
	descInFlight = prometheus.NewDesc("lmwarden_in_flight",
		"Requests in flight through the warden (from head to response end or close).",
		[]string{"model"}, nil)
	descReplicaInFlight = prometheus.NewDesc("lmwarden_replica_in_flight",
		"Requests in flight through the warden on this replica.",
		[]string{"model", "replica"}, nil)
	descSessionsLive = prometheus.NewDesc("lmwarden_sessions_live",
		"Sessions with a request in the last minute (active); the others keep their pin until session_ttl but are most likely over.",
		[]string{"model"}, nil)
	descSessionsPinned = prometheus.NewDesc("lmwarden_sessions_pinned",
		"Sessions in the session table (pinned to a replica), at most max_sessions.",
		[]string{"model"}, nil)
	descSessionsEvicted = prometheus.NewDesc("lmwarden_sessions_evicted_total",
		"Sessions removed to keep the table within max_sessions (least recently used first, those seen once before those that came back).",
		[]string{"model"}, nil)
	descUntrustedPins = prometheus.NewDesc("lmwarden_untrusted_pins_total",
		"Client-pinned headers (X-data-parallel-rank, X-Warden-Replica) from a client outside pin_sources (ignored; the request was routed normally).",
		[]string{"model"}, nil)
	descReplicaSessions = prometheus.NewDesc("lmwarden_replica_sessions",
		"Live sessions pinned to this replica.",
		[]string{"model", "replica"}, nil)
	descReplicaActive = prometheus.NewDesc("lmwarden_replica_sessions_active",
		"Sessions pinned to this replica with a request in the last minute (these add to its load).",
		[]string{"model", "replica"}, nil)
	descSessionsExpired = prometheus.NewDesc("lmwarden_sessions_expired_total",
		"Sessions removed after being idle longer than session_ttl.",
		[]string{"model"}, nil)
	descInvalidPins = prometheus.NewDesc("lmwarden_invalid_pins_total",
		"Client-pinned headers naming no valid, healthy replica (ignored; the request was routed normally).",
		[]string{"model"}, nil)
	descConvRequests = prometheus.NewDesc("lmwarden_conversation_requests_total",
		"Requests by what keyed their conversation: session (a session header), subagent (a session and an agent header), body (no session header: the body's stable start), none (placed by load). The share without a session header is (body + none) over all.",
		[]string{"model", "key"}, nil)
	descConversations = prometheus.NewDesc("lmwarden_conversations",
		"Conversations in the session table, by kind: session (a session's main conversation), subagent, body (keyed by the body's start).",
		[]string{"model", "kind"}, nil)
	descUnaffined = prometheus.NewDesc("lmwarden_unaffined_total",
		"Requests without a session id (placed least-loaded, not pinned).",
		[]string{"model"}, nil)
	descStayed = prometheus.NewDesc("lmwarden_session_requests_total",
		"Requests of known sessions by outcome: stayed (on the pinned replica) or moved.",
		[]string{"model", "outcome"}, nil)
	descStickyRatio = prometheus.NewDesc("lmwarden_sticky_ratio",
		"Share of known-session requests that stayed on their pinned replica (0-1).",
		[]string{"model"}, nil)
	descAffinity = prometheus.NewDesc("lmwarden_affinity",
		"1 when session affinity is on, 0 when the choice is handed to vLLM.",
		[]string{"model"}, nil)
	descSpillThreshold = prometheus.NewDesc("lmwarden_spill_threshold",
		"Effective spill threshold (in-flight requests); with auto, the lowest over healthy replicas.",
		[]string{"model", "auto"}, nil)
	descPlacementErrors = prometheus.NewDesc("lmwarden_placement_errors_total",
		"Placement decisions that failed, by reason (no_healthy_replica, retry_failed).",
		[]string{"model", "reason"}, nil)
	descAdmissionParked = prometheus.NewDesc("lmwarden_admission_parked",
		"Requests waiting at the warden for room in a replica's KV cache now (policy cost).",
		[]string{"model"}, nil)
	descAdmissionEvents = prometheus.NewDesc("lmwarden_admission_total",
		"Admission outcomes: parked (waited at the warden), rejected (queue full: 503), timed_out (placed at the timeout), yielded (a session gave its room up after its quantum), evicted (a room taken for a request at its timeout or a grown session), released (the room of a session that had likely ended, given to a waiter).",
		[]string{"model", "outcome"}, nil)
	descAdmissionEngaged = prometheus.NewDesc("lmwarden_admission_engaged",
		"1 while admission makes requests that find no room wait at the warden (mode auto: the live load passed 1.2, until it is under 1.0).",
		[]string{"model"}, nil)
	descAdmissionLoad = prometheus.NewDesc("lmwarden_admission_live_load_ratio",
		"Live context (the shared prefix once a replica, plus what waits) over the replicas' KV capacity times fill, averaged over a minute.",
		[]string{"model"}, nil)
	descAdmissionOldest = prometheus.NewDesc("lmwarden_admission_oldest_wait_seconds",
		"How long the oldest request parked now has waited (0: none parked).",
		[]string{"model"}, nil)
	descReplicaLive = prometheus.NewDesc("lmwarden_replica_live_context_tokens",
		"Context of the sessions live on the replica and of rooms granted to waiters, the shared prefix counted once (policies that decide from the cost model).",
		[]string{"model", "replica"}, nil)
	descReplicaBudget = prometheus.NewDesc("lmwarden_replica_live_budget_tokens",
		"What the replica's live sessions may hold: admission.fill times its KV capacity (vllm:cache_config_info).",
		[]string{"model", "replica"}, nil)
	descRetries = prometheus.NewDesc("lmwarden_retries_total",
		"Requests moved away from this replica after a failed connect.",
		[]string{"model", "replica"}, nil)
	descReplicaInfo = prometheus.NewDesc("lmwarden_replica_info",
		"Constant 1; maps the replica index to its URL.",
		[]string{"model", "replica", "url"}, nil)
	descHealthy = prometheus.NewDesc("lmwarden_replica_healthy",
		"1 while the poller finds the replica up, 0 after unhealthy_after failed polls (a draining replica stays 1).",
		[]string{"model", "replica"}, nil)
	descDraining = prometheus.NewDesc("lmwarden_replica_draining",
		"1 while the replica drains (admin API, lmwarden drain): no new conversations, live ones move at their next turn.",
		[]string{"model", "replica"}, nil)
	descPollFailures = prometheus.NewDesc("lmwarden_replica_poll_failures_total",
		"Failed polls of the replica's /health or /metrics.",
		[]string{"model", "replica"}, nil)
	descRunning = prometheus.NewDesc("lmwarden_replica_running",
		"vllm:num_requests_running as last polled.",
		[]string{"model", "replica"}, nil)
	descWaiting = prometheus.NewDesc("lmwarden_replica_waiting",
		"vllm:num_requests_waiting as last polled.",
		[]string{"model", "replica"}, nil)
	descKVUsage = prometheus.NewDesc("lmwarden_replica_kv_usage_ratio",
		"vllm:kv_cache_usage_perc (or gpu_cache_usage_perc) as last polled, 0-1.",
		[]string{"model", "replica"}, nil)
	descHitRate = prometheus.NewDesc("lmwarden_replica_prefix_hit_ratio",
		"Prefix-cache hit rate over hit_rate_window: delta(hits)/delta(queries), 0-1.",
		[]string{"model", "replica"}, nil)
	descLoad = prometheus.NewDesc("lmwarden_replica_load",
		"load(r) as placement computes it (agent/placement/placement.go).",
		[]string{"model", "replica"}, nil)
	descFirstByte = prometheus.NewDesc("lmwarden_time_to_first_byte_seconds",
		"From the request head read to the first response byte after the response head (the first streamed event), or to the response head when the body came with it, was not streamed, or was carried by the kernel datapath.",
		[]string{"model", "replica"}, nil)
	descDuration = prometheus.NewDesc("lmwarden_request_duration_seconds",
		"From the request head read to the end of the response, for every response relayed to its end.",
		[]string{"model", "replica"}, nil)
	descResponses = prometheus.NewDesc("lmwarden_responses_total",
		"Responses relayed from the replica to their end, by the replica's status code (200 has a series from the start).",
		[]string{"model", "replica", "code"}, nil)
	descAdmissionWait = prometheus.NewDesc("lmwarden_admission_wait_seconds",
		"How long admission kept a request waiting at the warden (parked requests only; policy cost, admission queue).",
		[]string{"model"}, nil)
)

var allDescs = []*prometheus.Desc{
	descBuildInfo, descRequests, descVLLMDecided, descInFlight, descReplicaInFlight, descSessionsLive,
	descSessionsPinned, descSessionsEvicted, descUntrustedPins, descReplicaSessions, descReplicaActive, descSessionsExpired, descInvalidPins,
	descUnaffined, descConvRequests, descConversations, descStayed, descStickyRatio, descAffinity, descSpillThreshold,
	descPlacementErrors, descAdmissionParked, descAdmissionEvents,
	descAdmissionEngaged, descAdmissionLoad, descAdmissionOldest, descReplicaLive, descReplicaBudget, descRetries, descReplicaInfo, descHealthy, descDraining, descPollFailures,
	descRunning, descWaiting, descKVUsage, descHitRate, descLoad,
	descFirstByte, descDuration, descAdmissionWait, descResponses,
}

// Collector exports the models' counters to Prometheus.
type Collector struct {
	models []*placement.Model
	build  adminapi.BuildInfo
}

// NewCollector returns a collector over models, run by build.
func NewCollector(models []*placement.Model, build adminapi.BuildInfo) *Collector {
	return &Collector{models: models, build: build}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	histogram := func(d *prometheus.Desc, h *placement.Histogram, labels ...string) {
		ch <- prometheus.MustNewConstHistogram(d, h.N, h.Sum, h.Cumulative(), labels...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(descBuildInfo, 1, c.build.Version, c.build.Revision, c.build.GoVersion)
	for _, m := range c.models {
		s := m.Status()
		mn := s.Name
		counter(descVLLMDecided, float64(m.VLLMDecided()), mn)
		gauge(descInFlight, float64(s.InFlight), mn)
		gauge(descSessionsLive, float64(s.ActiveSessions), mn)
		gauge(descSessionsPinned, float64(s.Sessions), mn)
		counter(descSessionsEvicted, float64(s.SessionsEvicted), mn)
		counter(descUntrustedPins, float64(s.UntrustedPins), mn)
		counter(descSessionsExpired, float64(s.SessionsExpired), mn)
		counter(descInvalidPins, float64(s.InvalidPins), mn)
		counter(descUnaffined, float64(s.Unaffined), mn)
		for k, n := range s.ConversationRequests {
			counter(descConvRequests, float64(n), mn, k)
		}
		for k, n := range s.Conversations {
			gauge(descConversations, float64(n), mn, k)
		}
		counter(descStayed, float64(s.Stayed), mn, "stayed")
		counter(descStayed, float64(s.Moved), mn, "moved")
		gauge(descStickyRatio, s.StickyShare, mn)
		gauge(descAffinity, b2f(s.Affinity), mn)
		gauge(descSpillThreshold, float64(s.Spill), mn, strconv.FormatBool(s.SpillAuto))
		counter(descPlacementErrors, float64(s.NoHealthy), mn, "no_healthy_replica")
		counter(descPlacementErrors, float64(s.RetryFailed), mn, "retry_failed")
		as := m.AdmissionStats()
		gauge(descAdmissionParked, float64(as.Parked), mn)
		counter(descAdmissionEvents, float64(as.Waits), mn, "parked")
		counter(descAdmissionEvents, float64(as.Rejected), mn, "rejected")
		counter(descAdmissionEvents, float64(as.TimedOut), mn, "timed_out")
		counter(descAdmissionEvents, float64(as.Yields), mn, "yielded")
		counter(descAdmissionEvents, float64(as.Evicted), mn, "evicted")
		counter(descAdmissionEvents, float64(as.Released), mn, "released")
		gauge(descAdmissionEngaged, b2f(as.Engaged), mn)
		gauge(descAdmissionLoad, as.LiveLoad, mn)
		gauge(descAdmissionOldest, as.OldestWait, mn)
		lat := m.Latency()
		histogram(descAdmissionWait, &lat.Parked, mn)
		for _, r := range s.Replicas {
			ri := strconv.Itoa(r.Index)
			if r.Index < len(lat.FirstByte) {
				histogram(descFirstByte, &lat.FirstByte[r.Index], mn, ri)
				histogram(descDuration, &lat.Duration[r.Index], mn, ri)
				if _, ok := lat.Statuses[r.Index][200]; !ok {
					counter(descResponses, 0, mn, ri, "200")
				}
				for code, n := range lat.Statuses[r.Index] {
					counter(descResponses, float64(n), mn, ri, strconv.Itoa(code))
				}
			}
			for k := range placement.NumKinds {
				counter(descRequests, float64(r.Requests[k.String()]), mn, ri, k.String())
			}
			gauge(descReplicaInFlight, float64(r.InFlight), mn, ri)
			gauge(descReplicaSessions, float64(r.Sessions), mn, ri)
			gauge(descReplicaActive, float64(r.ActiveSessions), mn, ri)
			counter(descRetries, float64(r.RetriedAway), mn, ri)
			gauge(descReplicaInfo, 1, mn, ri, r.URL)
			gauge(descHealthy, b2f(r.Healthy), mn, ri)
			gauge(descDraining, b2f(r.Draining), mn, ri)
			counter(descPollFailures, float64(r.PollFailures), mn, ri)
			gauge(descRunning, r.Running, mn, ri)
			gauge(descWaiting, r.Waiting, mn, ri)
			gauge(descKVUsage, r.KVUsed, mn, ri)
			gauge(descHitRate, r.PrefixHitRate, mn, ri)
			gauge(descLoad, r.Load, mn, ri)
			if r.Index < len(as.Live) {
				gauge(descReplicaLive, as.Live[r.Index], mn, ri)
				gauge(descReplicaBudget, as.Budget[r.Index], mn, ri)
			}
		}
	}
}
