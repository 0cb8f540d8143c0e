// Package agent is the warden's control plane as an operator meets it: New
// wires one placement Model per configured model (agent/placement) with a
// poller that scrapes every replica's /metrics, and serves the admin API
// (JSON bodies in agent/adminapi), its bearer-token auth, the dashboard
// (web/), the Prometheus collector and the token time series the
// dashboard draws. The configuration is agent/config. It never imports
// the shim or the kernel side: the session table's mirror into the BPF
// maps is an interface (placement.SessionSink) that cmd/lmwarden fills.
package agent
