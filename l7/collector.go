package l7

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// The shim's Prometheus metrics (the agent exports placement and replica
// metrics; these are about connections and bytes).
var (
	descShimConns = prometheus.NewDesc("lmwarden_shim_connections_total",
		"Client connections accepted by the shim.", []string{"model"}, nil)
	descShimHeads = prometheus.NewDesc("lmwarden_shim_requests_total",
		"Request heads read and handed to placement.", []string{"model"}, nil)
	descShimAnswered = prometheus.NewDesc("lmwarden_shim_answered_total",
		"Error responses the shim answered itself (400 malformed, 408 slow, 431 oversized head, 502 bad gateway, 503 no healthy replica, 504 replica timeout, 505 HTTP version).",
		[]string{"model", "code"}, nil)
	descShimAbandoned = prometheus.NewDesc("lmwarden_shim_abandoned_total",
		"Requests whose client left before they ended, by where they stood: body (before its request body arrived whole), parked (waiting for admission), response (before its response ended). The client's doing: never counted as an answer of the shim's or a replica's failure.",
		[]string{"model", "stage"}, nil)
	descOpenConns = prometheus.NewDesc("lmwarden_shim_open_connections",
		"Client connections open now, over every frontend (idle: waiting for a request head; awaiting_body: a request head read, its body not yet there; busy: in an exchange).",
		[]string{"state"}, nil)
	descConnLimit = prometheus.NewDesc("lmwarden_shim_connection_limit",
		"The bounds on client connections: total (max_connections) and per client address (max_connections_per_client); 0: none.",
		[]string{"bound"}, nil)
	descConnsRefused = prometheus.NewDesc("lmwarden_shim_connections_refused_total",
		"Client connections refused with 503 at a bound with nothing to close instead.",
		[]string{"bound"}, nil)
	descConnsShed = prometheus.NewDesc("lmwarden_shim_connections_shed_total",
		"Client connections closed to make room for a new one at a bound: the longest idle first, else (total bound) the request of a heavier client that waited longest for its body, answered 503.",
		[]string{"bound"}, nil)
	descBodyKeys = prometheus.NewDesc("lmwarden_shim_body_keys_total",
		"Requests without a session header, by what the body's start gave their conversation key: keyed (read from the bytes that came with the head), short (it lay beyond them: placed by load), none (no chat body with a Content-Length, or body_key off).",
		[]string{"model", "outcome"}, nil)
	descDatapathBytes = prometheus.NewDesc("lmwarden_datapath_bytes_total",
		"Body bytes relayed per replica by the datapath (direction up: client to replica; down: replica to client).",
		[]string{"model", "replica", "direction", "datapath"}, nil)
)

// Collector exports the counters of a set of shims.
type Collector struct{ shims []*Shim }

// NewCollector returns a collector over shims (register it once).
func NewCollector(shims ...*Shim) *Collector { return &Collector{shims: shims} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descShimConns
	ch <- descShimHeads
	ch <- descShimAnswered
	ch <- descBodyKeys
	ch <- descShimAbandoned
	ch <- descDatapathBytes
	ch <- descOpenConns
	ch <- descConnLimit
	ch <- descConnsRefused
	ch <- descConnsShed
}

// answeredCodes are the statuses the shim answers itself; each has a
// series from the start (zero until it happens), so that rate() and
// alerts see it before the first one.
var answeredCodes = []int{400, 408, 431, 502, 503, 504, 505}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	limits := map[*ConnLimits]bool{}
	for _, s := range c.shims {
		l := s.opts.Limits
		if limits[l] {
			continue
		}
		limits[l] = true
		st := l.Stats()
		ch <- prometheus.MustNewConstMetric(descOpenConns, prometheus.GaugeValue, float64(st.Open-st.Idle-st.AwaitingBody), "busy")
		ch <- prometheus.MustNewConstMetric(descOpenConns, prometheus.GaugeValue, float64(st.Idle), "idle")
		ch <- prometheus.MustNewConstMetric(descOpenConns, prometheus.GaugeValue, float64(st.AwaitingBody), "awaiting_body")
		ch <- prometheus.MustNewConstMetric(descConnLimit, prometheus.GaugeValue, float64(st.Max), "total")
		ch <- prometheus.MustNewConstMetric(descConnLimit, prometheus.GaugeValue, float64(st.PerClient), "client")
		for _, b := range limitNames {
			ch <- prometheus.MustNewConstMetric(descConnsRefused, prometheus.CounterValue, float64(st.Refused[b]), b)
			ch <- prometheus.MustNewConstMetric(descConnsShed, prometheus.CounterValue, float64(st.Shed[b]), b)
		}
	}
	seen := map[*datapath.UserPath]bool{}
	for _, s := range c.shims {
		model := s.placer.Name()
		st := s.Stats()
		ch <- prometheus.MustNewConstMetric(descShimConns, prometheus.CounterValue, float64(st.Connections), model)
		ch <- prometheus.MustNewConstMetric(descShimHeads, prometheus.CounterValue, float64(st.Requests), model)
		for i, n := range st.BodyKeys {
			ch <- prometheus.MustNewConstMetric(descBodyKeys, prometheus.CounterValue, float64(n), model, bodyKeyOutcomes[i])
		}
		codes := map[int]uint64{}
		for _, code := range answeredCodes {
			codes[code] = 0
		}
		for code, n := range st.Answered {
			codes[code] = n
		}
		for code, n := range codes {
			ch <- prometheus.MustNewConstMetric(descShimAnswered, prometheus.CounterValue, float64(n), model, strconv.Itoa(code))
		}
		for stage, n := range st.Abandoned {
			ch <- prometheus.MustNewConstMetric(descShimAbandoned, prometheus.CounterValue, float64(n), model, stage)
		}
		u := s.caps.Userspace
		if u == nil || seen[u] {
			continue
		}
		seen[u] = true
		counts := u.Counts()
		// Every replica of every model this datapath serves, from the start.
		for _, o := range c.shims {
			if o.dp != s.dp {
				continue
			}
			for i := range o.placer.Replicas() {
				k := datapath.ReplicaKey{Model: o.placer.Name(), Replica: i}
				if _, ok := counts[k]; !ok {
					counts[k] = datapath.ByteCounts{}
				}
			}
		}
		for k, b := range counts {
			r := strconv.Itoa(k.Replica)
			ch <- prometheus.MustNewConstMetric(descDatapathBytes, prometheus.CounterValue, float64(b.Up), k.Model, r, "up", u.Name())
			ch <- prometheus.MustNewConstMetric(descDatapathBytes, prometheus.CounterValue, float64(b.Down), k.Model, r, "down", u.Name())
		}
	}
}
