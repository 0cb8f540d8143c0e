// Command lmwarden is the one binary of LM Warden: the daemon (serve) and
// the endpoint picker over several hosts (picker), the operator's tools
// (status, sessions, check-config, selftest, unload, version), the
// simulated vLLM replica (sim), the benchmark (bench) and the one-command
// demo (demo).
//
// Each subcommand lives in its own file (serve.go, status.go, sim.go,
// bench.go, ...) and registers itself in init, so adding one never touches
// main.go, which only dispatches. The package is the one place where both
// sides of the warden meet: serve wires the kernel datapath (package
// kernel, over maps and bpf) into the shim (l7), and the maps into the
// placement's session mirror (agent/placement's SessionSink); every other
// package sees only its own side (docs/architecture.md).
package main
