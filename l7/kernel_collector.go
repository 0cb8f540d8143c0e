package l7

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The kernel datapath's metrics (register the *KernelPath itself).
var (
	descKernelBytes = prometheus.NewDesc("lmwarden_kernel_bytes_total",
		"Bytes of the kernel datapath per replica by where they crossed: kernel (redirected socket to socket by sk_skb), passed (handed to the shim by the verdict: heads, fallbacks), user_up and user_down (body bytes the shim forwarded itself).",
		[]string{"model", "replica", "path"}, nil)
	descKernelResponses = prometheus.NewDesc("lmwarden_kernel_responses_total",
		"Responses the kernel datapath carried (started) and whose end the verdict found (ended).",
		[]string{"model", "replica", "event"}, nil)
)

// Describe implements prometheus.Collector.
func (k *KernelPath) Describe(ch chan<- *prometheus.Desc) {
	ch <- descKernelBytes
	ch <- descKernelResponses
}

// Collect implements prometheus.Collector.
func (k *KernelPath) Collect(ch chan<- prometheus.Metric) {
	for key, c := range k.Counts() {
		r := strconv.Itoa(key.Replica)
		for path, v := range map[string]uint64{"kernel": c.KernelBytes, "passed": c.PassedBytes, "user_up": c.UserUp, "user_down": c.UserDown} {
			ch <- prometheus.MustNewConstMetric(descKernelBytes, prometheus.CounterValue, float64(v), key.Model, r, path)
		}
		ch <- prometheus.MustNewConstMetric(descKernelResponses, prometheus.CounterValue, float64(c.Requests), key.Model, r, "started")
		ch <- prometheus.MustNewConstMetric(descKernelResponses, prometheus.CounterValue, float64(c.Responses), key.Model, r, "ended")
	}
}

var _ prometheus.Collector = (*KernelPath)(nil)
