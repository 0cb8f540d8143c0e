package l7

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The shim's Prometheus metrics (the agent exports placement and replica
// metrics; these are about connections and bytes).
var (
	descShimConns = prometheus.NewDesc("lmwarden_shim_connections_total",
		"Client connections accepted by the shim.", []string{"model"}, nil)
	descShimHeads = prometheus.NewDesc("lmwarden_shim_requests_total",
		"Request heads read and handed to placement.", []string{"model"}, nil)
	descShimAnswered = prometheus.NewDesc("lmwarden_shim_answered_total",
		"Error responses the shim answered itself (400 malformed, 408 slow, 431 oversized head, 502 bad gateway, 503 no healthy replica, 504 replica timeout).",
		[]string{"model", "code"}, nil)
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
	ch <- descDatapathBytes
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	seen := map[*UserPath]bool{}
	for _, s := range c.shims {
		model := s.placer.Name()
		st := s.Stats()
		ch <- prometheus.MustNewConstMetric(descShimConns, prometheus.CounterValue, float64(st.Connections), model)
		ch <- prometheus.MustNewConstMetric(descShimHeads, prometheus.CounterValue, float64(st.Requests), model)
		for code, n := range st.Answered {
			ch <- prometheus.MustNewConstMetric(descShimAnswered, prometheus.CounterValue, float64(n), model, strconv.Itoa(code))
		}
		u, ok := s.dp.(*UserPath)
		if !ok || seen[u] {
			continue
		}
		seen[u] = true
		for k, b := range u.Counts() {
			r := strconv.Itoa(k.Replica)
			ch <- prometheus.MustNewConstMetric(descDatapathBytes, prometheus.CounterValue, float64(b.Up), k.Model, r, "up", u.Name())
			ch <- prometheus.MustNewConstMetric(descDatapathBytes, prometheus.CounterValue, float64(b.Down), k.Model, r, "down", u.Name())
		}
	}
}
