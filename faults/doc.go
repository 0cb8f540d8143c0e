// Package faults is LM Warden's fault suite: tests that run the real
// binaries (every simulated replica in a process of its own, started as
// `lmwarden sim`, and the warden as `lmwarden serve`), each test alone in
// a network namespace of its own, and break them the ways production
// breaks them: a replica killed or stopped under load, the warden killed
// or stopped under load on each datapath, thousands of connections with
// some abandoned mid-stream, hostile local neighbours (client pins, bodies
// that never arrive, floods of them past the connection bound, uploads
// abandoned half way, idle-socket floods, session floods by health checks
// and small prompts, reads of the whole session table, admin writes
// without a credential, DNS rebinding), stray signals, a frontend on
// another service's port, and the pinned state's directory and lock
// attacked by an unprivileged user. What each test checks, and
// what it measured before and after the hardening, is in
// docs/reliability.md.
//
// `make test` runs the short suite (a couple of minutes); `make soak` runs
// the long one (LMWARDEN_SOAK=1: 10,000 connections, minutes). The tests
// need root (network namespaces, the kernel datapaths, setpriv); without
// it they skip, and with LMWARDEN_REQUIRE_BPF=1 a skip is a failure.
//
// The package holds no code of the daemon: only this comment and tests.
package faults
