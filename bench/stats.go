package bench

import (
	"math"
	"sort"
)

// Percentile returns the p-th percentile (0 < p <= 100) of xs by the
// nearest-rank method: sort, then take the value at rank ceil(p/100 * n)
// (1-based). Every result is an observed value, no interpolation; the median
// of an even count is the lower middle. NaN for an empty slice. xs is not
// modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// SessionPercentile is the per-session view a closed loop needs: each
// session's own median, then the p-th percentile of those medians. A session
// that answered quickly and so sent many requests counts once, like one that
// waited. Sessions without samples are skipped.
func SessionPercentile(perSession map[string][]float64, p float64) float64 {
	medians := make([]float64, 0, len(perSession))
	for _, xs := range perSession {
		if len(xs) > 0 {
			medians = append(medians, Percentile(xs, 50))
		}
	}
	return Percentile(medians, p)
}

// Counter accumulates the increase of a monotonic counter sampled over time,
// as Prometheus' increase() does: a sample below the previous one means the
// counter was reset (the replica restarted), so the new value is the
// increase since the reset and never a negative delta.
type Counter struct {
	started  bool
	last     float64
	increase float64
	resets   int
}

// Observe feeds one sample.
func (c *Counter) Observe(v float64) {
	switch {
	case !c.started:
		c.started = true
	case v < c.last:
		c.resets++
		c.increase += v
	default:
		c.increase += v - c.last
	}
	c.last = v
}

// Increase is the total increase since the first sample.
func (c *Counter) Increase() float64 { return c.increase }

// Resets is how many resets were seen.
func (c *Counter) Resets() int { return c.resets }

// HitRate pools prefix-cache counters across replicas: the sum of the hits'
// increases over the sum of the queries' increases, both in tokens, as vLLM
// counts them. NaN when nothing was queried (no rate, rather than 0%).
func HitRate(hits, queries []*Counter) float64 {
	var h, q float64
	for _, c := range hits {
		h += c.Increase()
	}
	for _, c := range queries {
		q += c.Increase()
	}
	if q <= 0 {
		return math.NaN()
	}
	return h / q
}

// Shares turns per-replica counts into shares of the total (all zero when
// the total is zero), the load per replica of the report.
func Shares(counts []float64) []float64 {
	var total float64
	for _, c := range counts {
		total += c
	}
	out := make([]float64, len(counts))
	if total == 0 {
		return out
	}
	for i, c := range counts {
		out[i] = c / total
	}
	return out
}

// Imbalance is max/mean of per-replica counts: 1 is a perfectly even split,
// replicas (the count) is everything on one. 0 when there is no load.
func Imbalance(counts []float64) float64 {
	var total, peak float64
	for _, c := range counts {
		total += c
		peak = max(peak, c)
	}
	if total == 0 {
		return 0
	}
	return peak / (total / float64(len(counts)))
}

// Mean is the arithmetic mean, NaN for no samples.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
