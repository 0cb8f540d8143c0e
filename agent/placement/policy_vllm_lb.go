package placement

import (
	"time"

	"github.com/lmwarden/lmwarden/internal/vllmlb"
)

// Policy `vllm-lb` is vLLM's own data-parallel balancer as it really behaves
// (internal/vllmlb: one balancer per API server, as many as replicas, each
// request meeting one of them at random; 4·waiting + running from the
// coordinator's published counts, local bumps between publishes, a
// rotating start). It is also what
// affinity off means in the per-replica shape, so it observes every poll
// whichever policy is active: switching affinity off finds its counts
// current.

type vllmLBPolicy struct {
	b                *vllmlb.Balancer
	waiting, running []int // the engines' counts as the coordinator collects them
	eligible         func(int) bool
}

func newVLLMLBPolicy(m *Model, o ModelOptions) policy {
	n := len(m.reps)
	mode, _ := vllmlb.ParseStatsMode(m.cfg.VLLMLBStats) // validated with the config
	return &vllmLBPolicy{
		b:        vllmlb.New(n, mode, o.Seed),
		waiting:  make([]int, n),
		running:  make([]int, n),
		eligible: func(i int) bool { return m.reps[i].healthy },
	}
}

func (p *vllmLBPolicy) pick(m *Model, _ uint64, r Request) int {
	if i := p.b.Pick(r.Now, p.eligible); i >= 0 {
		return i
	}
	return m.roundRobin()
}

func (p *vllmLBPolicy) observe(_ *Model, i int, s ReplicaMetrics, now time.Time) {
	p.waiting[i], p.running[i] = int(s.Waiting), int(s.Running)
	p.b.Observe(now, p.waiting, p.running)
}
