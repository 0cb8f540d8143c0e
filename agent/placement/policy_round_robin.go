package placement

// Policy `round-robin` is what a plain Kubernetes Service or L4 balancer does:
// the next healthy replica in turn, blind to sessions and load.

type roundRobinPolicy struct{}

func newRoundRobinPolicy(*Model, ModelOptions) policy { return roundRobinPolicy{} }

func (roundRobinPolicy) pick(m *Model, _ uint64, _ Request) int { return m.roundRobin() }

// roundRobin is the next healthy replica after the last one it chose (-1:
// none). It is the Model's, not the policy's, because it is also the
// fallback of policies that cannot decide (vllm-lb with no eligible rank,
// hash without a session id), and they share one turn with round-robin.
func (m *Model) roundRobin() int {
	n := len(m.reps)
	for k := range n {
		i := (m.rr + k) % n
		if m.reps[i].healthy {
			m.rr = (i + 1) % n
			return i
		}
	}
	return -1
}
