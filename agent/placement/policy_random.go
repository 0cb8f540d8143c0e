package placement

import "math/rand/v2"

// Policy `random` is a uniformly random healthy replica (seeded: the virtual
// bench's arms are reproducible).

type randomPolicy struct{ rng *rand.Rand }

func newRandomPolicy(_ *Model, opts ModelOptions) policy {
	return &randomPolicy{rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))}
}

func (p *randomPolicy) pick(m *Model, _ uint64, _ Request) int {
	k := p.rng.IntN(m.healthyCount())
	for i := range m.reps {
		if m.reps[i].healthy {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return m.roundRobin()
}

func (m *Model) healthyCount() int {
	n := 0
	for i := range m.reps {
		if m.reps[i].healthy {
			n++
		}
	}
	return n
}
