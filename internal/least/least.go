// Package least is the one rotating-start argmin behind every "least
// loaded" choice: the agent's policies and the model of vLLM's balancer
// (internal/vllmlb) scan their replicas with it, so they break ties the
// same way.
package least

import "cmp"

// By returns the index i in [0, n) with the lowest cost(i) among those for
// which cost reports ok, or -1 when none does. The scan starts at *start
// and wraps around; of equal costs the first one scanned wins. Each call
// then moves *start one on (mod n), so that a run of ties, such as idle
// replicas, spreads over all of them instead of filling index 0 first.
// *start must be in [0, n).
func By[C cmp.Ordered](start *int, n int, cost func(i int) (c C, ok bool)) int {
	best := -1
	var bestCost C
	for k := range n {
		i := *start + k
		if i >= n {
			i -= n
		}
		if c, ok := cost(i); ok && (best < 0 || c < bestCost) {
			best, bestCost = i, c
		}
	}
	if n > 0 {
		*start = (*start + 1) % n
	}
	return best
}
