#!/usr/bin/env bash
# One run of BenchmarkDatapaths (cmd/lmwarden/datapaths_bench_test.go):
# direct, nginx, HAProxy and `lmwarden serve` with each datapath (user,
# skb, msg) in front of the same upstream process, fresh and keep-alive
# connections, 1 and 32 streams; it prints the table docs/kernel.md shows.
# As root: it installs Debian's nginx and HAProxy when missing (without
# starting their services) and runs in a network namespace of its own.
#
#   scripts/bench-datapaths.sh            # 5 rounds (60 requests with one stream, 320 with 32)
#   N=10 scripts/bench-datapaths.sh       # rounds
#   LMWARDEN_BENCH_PATHS=direct,msg LMWARDEN_BENCH_CONNS=keepalive LMWARDEN_BENCH_STREAMS=1 scripts/bench-datapaths.sh  # for a profile
#
# Knobs for profiles (docs/kernel.md, "Profile"):
#   LMWARDEN_BENCH_PATHS=direct,nginx,msg,msg@GOMAXPROCS=1   # paths; "@VAR=value" runs a warden with it set
#   LMWARDEN_BENCH_PATHS=direct,msg,msg@bin=/tmp/lmwarden-old # "@bin=PATH": that build of lmwarden, side by side
#   LMWARDEN_BENCH_STREAMS=1         # streams at once (1,32): one stream only
#   LMWARDEN_BENCH_CONNS=keepalive   # connections (fresh and keepalive): keep-alive only
#   LMWARDEN_BENCH_EVENTS=1          # SSE events per response (256): 1 measures TTFB alone, quickly
#   LMWARDEN_BENCH_PER_ROUND=100     # requests per path and setting in each round
#   LMWARDEN_PHASES=/tmp/phases      # each warden writes its per-step profile to /tmp/phases.<path>
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v nginx >/dev/null || need+=(nginx)
command -v haproxy >/dev/null || need+=(haproxy)
if ((${#need[@]})); then
	# Installed to be run by the benchmark, not as services.
	policy=/usr/sbin/policy-rc.d
	made=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1
	fi
	trap '[[ $made == 1 ]] && rm -f "$policy"' EXIT
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
n=${N:-5}
unshare -n sh -c "ip link set lo up && LMWARDEN_BENCH_ROUNDS=$n go test -run '^\$' -bench Datapaths -benchtime 1x -timeout 60m ./cmd/lmwarden/"
