// Package picker is LM Warden's endpoint picker for more than one GPU
// host: a gateway that implements the Gateway API Inference Extension
// (Envoy with ext_proc: Envoy Gateway, kgateway, Istio and others) asks it,
// for every request, which host's warden gets the request, and HAProxy can
// ask it the same question through its stream processing offload protocol
// (SPOE). The answer is LM Warden's own placement: package agent's Model,
// with the hosts as its replicas, so a conversation stays on the host that
// holds its cache, a new one goes to the host with the most room, and the
// conversations of a host that stops answering are placed again.
//
// What each host has room for is read from what its warden already serves
// (GET /api/v1/models on its admin API): no store of its own, no agent on
// the hosts. The files:
//
//	hosts.go      the host list: parsing, the endpoint address, the admin URL
//	registry.go   the hosts' state: polling each warden, health, the Model over the hosts, Pick
//	load.go       one warden's answer folded into the load of its host
//	discover.go   hosts found by resolving a DNS name (a headless Service)
//	protocol.go   the endpoint picker protocol's names and the helpers that read and write them
//	extproc.go    the ext_proc server: one gRPC stream per HTTP request
//	health.go     the gRPC health service (liveness, readiness, ext_proc)
//	admin.go      the picker's HTTP admin server: hosts, models, sessions, /metrics, probes
//	metrics.go    the picker's own Prometheus families
//	spoe.go       the HAProxy SPOE agent (docs/multihost.md)
//
// docs/multihost.md is the user's reference.
package picker
