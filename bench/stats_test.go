package bench

import (
	"math"
	"testing"
)

func TestPercentileIsNearestRank(t *testing.T) {
	xs := []float64{15, 20, 35, 40, 50} // the textbook example
	cases := []struct{ p, want float64 }{
		{5, 15}, {30, 20}, {40, 20}, {50, 35}, {95, 50}, {100, 50},
	}
	for _, c := range cases {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	// Even count: the median is the lower middle, an observed value.
	if got := Percentile([]float64{4, 1, 3, 2}, 50); got != 2 {
		t.Errorf("median of 1..4 = %v, want 2", got)
	}
	// p95 of 1..20 is rank ceil(19) = 19.
	var twenty []float64
	for i := 20; i >= 1; i-- {
		twenty = append(twenty, float64(i))
	}
	if got := Percentile(twenty, 95); got != 19 {
		t.Errorf("p95 of 1..20 = %v, want 19", got)
	}
	if twenty[0] != 20 {
		t.Error("Percentile sorted its input")
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
}

func TestSessionPercentileWeighsEverySessionOnce(t *testing.T) {
	// Session a is fast and sent many requests, b and c are slow. Per
	// request the median is fast; per session (medians 1, 9, 10) it is 9.
	per := map[string][]float64{
		"a": {1, 1, 1, 1, 1, 1, 1, 1},
		"b": {8, 9, 10},
		"c": {10, 10},
		"d": {},
	}
	var all []float64
	for _, xs := range per {
		all = append(all, xs...)
	}
	if got := Percentile(all, 50); got != 1 {
		t.Fatalf("per-request median = %v, want 1", got)
	}
	if got := SessionPercentile(per, 50); got != 9 {
		t.Fatalf("per-session median = %v, want 9", got)
	}
	if got := SessionPercentile(per, 95); got != 10 {
		t.Fatalf("per-session p95 = %v, want 10", got)
	}
}

func TestHitRatePoolsDeltasAcrossReplicas(t *testing.T) {
	// Replica 0: queries 1000 -> 3000, hits 500 -> 2300 (delta 2000, 1800).
	// Replica 1: queries 0 -> 1000, hits 0 -> 200 (delta 1000, 200).
	// Pooled: (1800+200)/(2000+1000) = 2/3, not the mean of 0.9 and 0.2.
	q0, h0, q1, h1 := &Counter{}, &Counter{}, &Counter{}, &Counter{}
	for _, v := range []float64{1000, 2000, 3000} {
		q0.Observe(v)
	}
	for _, v := range []float64{500, 1400, 2300} {
		h0.Observe(v)
	}
	q1.Observe(0)
	q1.Observe(1000)
	h1.Observe(0)
	h1.Observe(200)
	if got := HitRate([]*Counter{h0, h1}, []*Counter{q0, q1}); math.Abs(got-2.0/3) > 1e-12 {
		t.Fatalf("pooled hit rate = %v, want 2/3", got)
	}
	if !math.IsNaN(HitRate(nil, []*Counter{{}})) {
		t.Fatal("hit rate without queries is not NaN")
	}
}

func TestCounterResetIsNeverANegativeDelta(t *testing.T) {
	// The replica restarts between 5000 and 300: the increase is
	// (5000-4000) + 300 (since the reset) + (900-300) = 1900.
	c := &Counter{}
	for _, v := range []float64{4000, 5000, 300, 900} {
		c.Observe(v)
	}
	if c.Increase() != 1900 || c.Resets() != 1 {
		t.Fatalf("increase %v with %d resets, want 1900 and 1", c.Increase(), c.Resets())
	}
	hits, queries := &Counter{}, &Counter{}
	for _, v := range []float64{8000, 100} { // reset: hits look like -7900
		hits.Observe(v)
	}
	for _, v := range []float64{10000, 400} {
		queries.Observe(v)
	}
	if got := HitRate([]*Counter{hits}, []*Counter{queries}); got != 0.25 {
		t.Fatalf("hit rate across a reset = %v, want 100/400", got)
	}
}

func TestSharesAndImbalance(t *testing.T) {
	counts := []float64{10, 30, 0, 40}
	sh := Shares(counts)
	want := []float64{0.125, 0.375, 0, 0.5}
	for i := range want {
		if sh[i] != want[i] {
			t.Fatalf("shares %v, want %v", sh, want)
		}
	}
	if got := Imbalance(counts); got != 2 { // 40 / (80/4)
		t.Fatalf("imbalance %v, want 2", got)
	}
	if Imbalance([]float64{0, 0}) != 0 || Shares([]float64{0, 0})[0] != 0 {
		t.Fatal("no load is not zero")
	}
}
