package placement

import (
	"math"

	"github.com/lmwarden/lmwarden/internal/least"
)

// Policy `shortest-queue` is an idealised vLLM balancer: 4·waiting + running
// from the warden's exact, fresh in-flight counts instead of the
// coordinator's published ones. A stronger peer than vllm-lb.

type shortestQueuePolicy struct{}

func newShortestQueuePolicy(*Model, ModelOptions) policy { return shortestQueuePolicy{} }

// pick takes the warden's in-flight count as the replica's total (the
// replica's own running+waiting if larger): waiting is what exceeds the
// batch size last seen at saturation (the replica's waiting gauge if
// larger), running the rest. Ties rotate like vLLM's.
func (shortestQueuePolicy) pick(m *Model, _ uint64, _ Request) int {
	return least.By(&m.start, len(m.reps), func(i int) (float64, bool) {
		r := &m.reps[i]
		total := math.Max(float64(r.inFlight), r.metrics.Running+r.metrics.Waiting)
		waiting := r.metrics.Waiting
		if r.saturatedRunning >= 1 {
			waiting = math.Max(waiting, total-r.saturatedRunning)
		}
		return 4*waiting + (total - waiting), r.healthy
	})
}
