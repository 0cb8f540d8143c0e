package bench

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// bootRatios is g over base, pooled TTFT p95 and output, on the seeds both
// have, with a bootstrap over those seeds: resample them with replacement,
// the same draw for both groups (they are paired), boot times. The random
// source is fixed so that a table is reproducible.
func bootRatios(base, g *PoolGroup, step string, boot int) (p95, out PoolInterval) {
	var common []uint64
	for _, s := range g.Seeds() {
		if _, ok := base.Runs[s]; ok {
			common = append(common, s)
		}
	}
	if len(common) == 0 {
		return PoolInterval{Point: math.NaN()}, PoolInterval{Point: math.NaN()}
	}
	wb, wg := newWeightedPool(base, step, common), newWeightedPool(g, step, common)
	weights := make([]int, len(common))
	stat := func() (float64, float64) {
		return wg.percentile(weights, 95) / wb.percentile(weights, 95), wg.output(weights) / wb.output(weights)
	}
	for i := range weights {
		weights[i] = 1
	}
	p95.Point, out.Point = stat()
	p95.Seeds, out.Seeds = len(common), len(common)
	rng := rand.New(rand.NewPCG(1, 2))
	var p95s, outs []float64
	for range boot {
		clear(weights)
		for range common {
			weights[rng.IntN(len(common))]++
		}
		a, b := stat()
		if !math.IsNaN(a) && !math.IsInf(a, 0) {
			p95s = append(p95s, a)
		}
		if !math.IsNaN(b) && !math.IsInf(b, 0) {
			outs = append(outs, b)
		}
	}
	p95.Lo, p95.Hi = Percentile(p95s, 5), Percentile(p95s, 95)
	out.Lo, out.Hi = Percentile(outs, 5), Percentile(outs, 95)
	return p95, out
}

// weightedPool is one group's TTFTs on a list of seeds, sorted once: a
// bootstrap resample is then a weight a seed (how many times it was
// drawn), and its pooled percentile one walk up the sorted values instead
// of a sort of tens of thousands of turns a resample.
type weightedPool struct {
	ttft   []float64 // every seed's, sorted
	seed   []int     // the index of the seed each ttft came from
	turns  []int     // TTFTs a seed
	tokens []int64   // output tokens a seed
}

func newWeightedPool(g *PoolGroup, step string, seeds []uint64) *weightedPool {
	w := &weightedPool{turns: make([]int, len(seeds)), tokens: make([]int64, len(seeds))}
	type val struct {
		v    float64
		seed int
	}
	var all []val
	for i, s := range seeds {
		t := g.Runs[s].Steps[step]
		for _, v := range t.TTFT {
			all = append(all, val{v, i})
		}
		w.turns[i], w.tokens[i] = len(t.TTFT), t.Output
	}
	slices.SortStableFunc(all, func(a, b val) int { return cmp.Compare(a.v, b.v) })
	for _, x := range all {
		w.ttft, w.seed = append(w.ttft, x.v), append(w.seed, x.seed)
	}
	return w
}

// percentile is the nearest-rank percentile (as Percentile) of the pool in
// which seed i's turns appear weights[i] times; NaN when it is empty.
func (w *weightedPool) percentile(weights []int, p float64) float64 {
	n := 0
	for i, k := range weights {
		n += k * w.turns[i]
	}
	if n == 0 {
		return math.NaN()
	}
	rank := min(max(int(math.Ceil(p/100*float64(n))), 1), n)
	seen := 0
	for j, v := range w.ttft {
		if seen += weights[w.seed[j]]; seen >= rank {
			return v
		}
	}
	return w.ttft[len(w.ttft)-1]
}

// output is the pool's output tokens.
func (w *weightedPool) output(weights []int) float64 {
	var sum int64
	for i, k := range weights {
		sum += int64(k) * w.tokens[i]
	}
	return float64(sum)
}
