// Package haproxy holds no code of the daemon: its folder has HAProxy
// configurations for a front tier over several GPU hosts
// (haproxy-hash.cfg: consistent hashing on the session header;
// haproxy-picker.cfg with lmwarden-spoe.conf: LM Warden's placement
// through `lmwarden picker --spoe`). Its test runs Debian's haproxy with
// them in front of three hosts' wardens (docs/multihost.md); Render and
// Start run them in tests.
package haproxy
