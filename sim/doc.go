// Package sim is a simulated vLLM replica, faithful enough that a routing
// decision has the same consequence as on real cards: the upstream of
// every test, of the demo and of the benchmark (docs/sim.md).
//
// Its engine (Virtual) runs replicas on simulated time as discrete events:
// vLLM's block pool with automatic prefix caching (full blocks keyed by
// chained hashes, free blocks evicted least recently used: cache.go), vLLM's scheduler with chunked prefill
// and preemption (scheduler.go), and a step time from the card's
// arithmetic (a Profile: profile.go, the built-in ones in profiles/).
// Serve puts the engine behind real HTTP on a wall clock scaled by a
// speed: the OpenAI and Anthropic APIs with streaming, tool calls and
// usage as vLLM answers, /metrics under vLLM's names (package
// internal/vllmmetrics), one port per replica or one port for every
// data-parallel rank with vLLM's balancer in front (internal/vllmlb).
// Measure (`lmwarden sim calibrate`) fits a Profile to a real replica
// from the replica's own reports.
//
// The benchmark drives Virtual directly, with no sockets; the warden
// never imports this package.
package sim
