#!/usr/bin/env bash
# Installs what the tests need, and only what is missing, so that `make test`
# works on a fresh Debian 12 machine (the README's promise) and is cheap on a
# machine that already has everything.
#   - Debian packages: bpftool (map inspection in BPF tests), chromium (the
#     dashboard's browser test), prometheus (promtool and the server: the
#     alert rules and the Grafana dashboard in deploy/), iproute2, haproxy
#     (the front tier over several hosts, deploy/haproxy).
#   - npm packages: the official clients (@anthropic-ai/sdk, openai) that the
#     client-compatibility tests run unmodified, and the Claude Code CLI
#     (@anthropic-ai/claude-code, a pinned version: its native binary comes
#     as an optional per-platform package), into scripts/clients.
#   - bpffs at /sys/fs/bpf when running as root.
# Go modules come through `go test` itself.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v bpftool >/dev/null 2>&1 || need+=(bpftool)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# HAProxy as the front tier over several hosts (deploy/haproxy's test).
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v curl >/dev/null 2>&1 || need+=(curl) # docs/deploy.md's commands, run by its test
# promtool (alert rules) and the Prometheus server (the Grafana dashboard's
# queries against real scrapes) come in one Debian package.
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || need+=(prometheus)
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${need[*]}; run as root or install them" >&2
	else
		echo "deps: installing ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	fi
fi

if [ "$(id -u)" -eq 0 ] && ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
	mount -t bpf bpf /sys/fs/bpf || echo "deps: could not mount bpffs" >&2
fi

if command -v npm >/dev/null 2>&1 && [ -f scripts/clients/package.json ]; then
	if [ ! -d scripts/clients/node_modules/@anthropic-ai/sdk ] || [ ! -d scripts/clients/node_modules/openai ] ||
		[ ! -x scripts/clients/node_modules/.bin/claude ] ||
		! grep -q '"version": "2.1.332"' scripts/clients/node_modules/@anthropic-ai/claude-code/package.json 2>/dev/null; then
		echo "deps: npm install in scripts/clients"
		(cd scripts/clients && npm install --no-audit --no-fund --loglevel=error)
	fi
fi
