// Package placement is the decision at the heart of the warden: per model,
// which replica serves each request (docs/placement.md). Model holds the
// replicas and their load, the session table, every policy (policy_*.go),
// the cost model that the cost-aware policies share, cache-capacity
// admission, the latency histograms the shim feeds, and the status
// snapshot the admin API reports (in agent/adminapi's types). It imports
// no HTTP, Prometheus or YAML: the shim (l7) asks it, the warden (agent)
// feeds it polls, and the benchmark drives it on a virtual clock.
package placement
