package placement

import (
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// policy is one placement rule. Each lives in its own file,
// policy_<name>.go, with the state only it keeps; the Model holds one
// instance of every registered policy, so that switching policies at run
// time finds each one's state as it left it. What several policies share
// is the Model's: the replicas and their load (placement.go), the session
// table (sessions.go), the rotation that breaks ties (Model.start), and the
// cost model of the cost-aware policies and admission (costmodel.go).
type policy interface {
	// pick returns the replica for request r of the session with hash h
	// (0: no session id). It is called with m.mu held, after Place has
	// handled client pins, health and affinity: at least one replica is
	// healthy, and pick must return one of the healthy ones. Place then
	// books the session on the chosen replica (KindBalanced).
	pick(m *Model, h uint64, r Request) int
}

// sessionPlacer is a policy that keeps the session table itself and says
// how each request was placed (sticky: new, sticky, spilled, repinned,
// unaffined). Place hands it the whole decision instead of calling pick.
type sessionPlacer interface {
	policy
	// place chooses and commits (m.commit) the replica for request r of
	// conversation c (c.key 0: none) found at table position pos (-1:
	// not there).
	place(m *Model, c conversation, pos int, r Request) Placement
}

// replicaObserver is a policy that learns from every poll of every
// replica, whichever policy is active.
type replicaObserver interface {
	observe(m *Model, i int, s ReplicaMetrics, now time.Time)
}

// policies is the registry: every policy's implementation, in the order
// Policies lists their names (bench's `--policies all`, error messages,
// docs). Adding a policy is its name in policy_names.go, its file and one
// line here; TestEveryPolicyNameHasAnImplementation and
// TestEveryPolicyIsDocumented say what is missing.
var policies = []struct {
	name config.Policy
	make func(m *Model, opts ModelOptions) policy
}{
	{config.PolicySticky, newStickyPolicy},
	{config.PolicyVLLMLB, newVLLMLBPolicy},
	{config.PolicyShortestQueue, newShortestQueuePolicy},
	{config.PolicyRoundRobin, newRoundRobinPolicy},
	{config.PolicyRandom, newRandomPolicy},
	{config.PolicyHash, newHashPolicy},
	{config.PolicyCost, newCostPolicy},
	{config.PolicyCacheAware, newCacheAwarePolicy},
	{config.PolicyStickyUntilSaturated, newStickyUntilSaturatedPolicy},
}

// newPolicies makes the model's instance of every registered policy; call
// it once the replicas are set up.
func (m *Model) newPolicies(opts ModelOptions) {
	m.impls = make(map[config.Policy]policy, len(policies))
	for _, p := range policies {
		impl := p.make(m, opts)
		m.impls[p.name] = impl
		if o, ok := impl.(replicaObserver); ok {
			m.observers = append(m.observers, o)
		}
	}
	m.setActive(m.policy)
}

// setActive makes p the policy that decides while affinity is on; call
// with m.mu held (or before the model is shared).
func (m *Model) setActive(p config.Policy) {
	m.policy, m.active = p, m.impls[p]
	m.activePlacer, _ = m.active.(sessionPlacer)
}
