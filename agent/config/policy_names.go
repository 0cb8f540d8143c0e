package config

import (
	"fmt"
	"strings"
)

// Policy names a placement policy, selectable per model (config `policy`,
// `--policy`, PUT /api/v1/models/{name}/policy).
type Policy string

// The policies, each described where it is implemented
// (policy_<name>.go) and in docs/placement.md.
const (
	PolicySticky               Policy = "sticky"
	PolicyVLLMLB               Policy = "vllm-lb"
	PolicyShortestQueue        Policy = "shortest-queue"
	PolicyRoundRobin           Policy = "round-robin"
	PolicyRandom               Policy = "random"
	PolicyHash                 Policy = "hash"
	PolicyCost                 Policy = "cost"
	PolicyCacheAware           Policy = "cache-aware"
	PolicyStickyUntilSaturated Policy = "sticky-until-saturated"
)

// policyNames is every policy, in the order users see them listed.
var policyNames = []Policy{
	PolicySticky, PolicyVLLMLB, PolicyShortestQueue, PolicyRoundRobin, PolicyRandom,
	PolicyHash, PolicyCost, PolicyCacheAware, PolicyStickyUntilSaturated,
}

// Policies lists every policy name.
func Policies() []Policy { return append([]Policy(nil), policyNames...) }

// ParsePolicy returns p if it names a policy, else an error listing them.
func ParsePolicy(p Policy) (Policy, error) {
	for _, q := range policyNames {
		if p == q {
			return p, nil
		}
	}
	names := make([]string, len(policyNames))
	for i, q := range policyNames {
		names[i] = string(q)
	}
	return "", fmt.Errorf("%q: want one of %s", string(p), strings.Join(names, ", "))
}
