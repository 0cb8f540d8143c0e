package placement

import (
	"math"
	"testing"
)

// quantile follows histogram_quantile: linear inside the bucket holding
// the rank, the top bound for anything above it, NaN when empty.
func TestHistogramQuantileInterpolatesInsideItsBucket(t *testing.T) {
	h := NewHistogram([]float64{1, 2, 4})
	if !math.IsNaN(h.Quantile(.5)) {
		t.Fatal("empty histogram has a quantile")
	}
	for _, v := range []float64{0.5, 1.5, 1.5, 3} { // buckets: (0,1] 1, (1,2] 2, (2,4] 1
		h.Observe(v)
	}
	for _, c := range []struct{ q, want float64 }{
		{.25, 1},   // rank 1: the end of the first bucket
		{.5, 1.5},  // rank 2: half way through (1,2]
		{.75, 2},   // rank 3
		{1, 4},     // rank 4: the end of (2,4]
		{.125, .5}, // rank 0.5: half way through (0,1]
	} {
		if got := h.Quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q%.3f = %v, want %v", c.q, got, c.want)
		}
	}
	var sum Histogram = NewHistogram([]float64{1, 2, 4})
	sum.Add(&h)
	sum.Add(&h)
	sum.Observe(10) // above every bound: the top bound stands for it
	if sum.N != 9 || sum.Quantile(1) != 4 || sum.Cumulative()[2] != 6 {
		t.Errorf("added: n %d, q1 %v, cumulative %v", sum.N, sum.Quantile(1), sum.Cumulative())
	}
}
