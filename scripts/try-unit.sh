#!/usr/bin/env bash
# Runs scripts/lmwarden.service under a real systemd without touching the
# host: boots this machine's own OS in a throwaway systemd-nspawn container
# (an overlay of /, its own network namespace, a fresh bpffs), installs the
# warden there as docs/deploy.md says (make install, useradd, daemon-reload,
# enable --now) in front of four simulated replicas, sends a few requests
# and prints what systemd and the warden say. Needs root and Debian's
# systemd-container (installed when missing). Not part of make test: it
# boots a whole OS and takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "try-unit: needs root" >&2; exit 1; }
command -v systemd-nspawn >/dev/null || apt-get install -y -qq systemd-container >/dev/null

work=$(mktemp -d /tmp/lmwarden-try-unit.XXXXXX)
root=$work/root nsp=
cleanup() {
	[ -n "$nsp" ] && kill "$nsp" 2>/dev/null && sleep 5
	umount "$work/bpffs" "$root" "$work/up" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/up" "$root" "$work/bpffs"
mount -t tmpfs tmpfs "$work/up"
mkdir -p "$work/up/u" "$work/up/w"
mount -t overlay overlay -o "lowerdir=/,upperdir=$work/up/u,workdir=$work/up/w" "$root"
mount -t bpf bpf "$work/bpffs" # a bpffs of its own: the host's pinned state is not touched
rm -f "$root/etc/machine-id"

make -s build
# The container's seccomp filter refuses bpf(2) unless told; the three
# capabilities are the unit's.
systemd-nspawn -D "$root" --private-network --register=no --keep-unit -M lmwarden-try \
	--capability=CAP_BPF,CAP_PERFMON,CAP_NET_ADMIN --system-call-filter=bpf \
	--bind="$work/bpffs:/sys/fs/bpf" --bind-ro="$PWD:/src" --boot >"$work/console.log" 2>&1 &
nsp=$!
for _ in $(seq 60); do
	pid=$(pgrep -P "$nsp" systemd || true)
	[ -n "$pid" ] && nsenter -t "$pid" -a systemctl is-system-running 2>/dev/null | grep -qE 'running|degraded' && break
	sleep 1
done
[ -n "${pid:-}" ] || { cat "$work/console.log"; exit 1; }
inside() { nsenter -t "$pid" -a "$@"; }

inside install -D -m 0755 /src/bin/lmwarden /usr/local/bin/lmwarden
inside install -D -m 0644 /src/scripts/lmwarden.service /etc/systemd/system/lmwarden.service
inside useradd --system --no-create-home --shell /usr/sbin/nologin lmwarden
inside mkdir -p /etc/lmwarden
inside sh -c 'cat > /etc/lmwarden/lmwarden.yaml' <<'EOF'
admin: 127.0.0.1:9100
models:
  - name: qwen3-4b
    frontend: 0.0.0.0:8000
    replicas: [http://127.0.0.1:8101, http://127.0.0.1:8102, http://127.0.0.1:8103, http://127.0.0.1:8104]
EOF
inside systemd-run -q --unit=vllm-sim /usr/local/bin/lmwarden sim --replicas 4 --listen 127.0.0.1:8101 --speed 20
inside systemctl daemon-reload
inside systemctl enable --now lmwarden
inside sh -c 'until curl -sf http://127.0.0.1:9100/readyz >/dev/null; do sleep 1; done'
for s in 1 2 3; do
	inside curl -sf http://127.0.0.1:8000/v1/messages -H 'content-type: application/json' -H "X-Session-Id: try-$s" \
		-d '{"model":"qwen3-4b","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}' >/dev/null
done
inside systemctl status lmwarden --no-pager | sed -n 1,12p # reads it all: no SIGPIPE under pipefail
inside systemctl show lmwarden -p Type -p StatusText -p WatchdogUSec -p User -p NRestarts
inside systemd-analyze security lmwarden | tail -1
inside journalctl -u lmwarden --no-pager -b | grep -E 'datapath|serving' | cut -c1-240
inside /usr/local/bin/lmwarden status
inside systemctl restart lmwarden
inside sh -c 'until curl -sf http://127.0.0.1:9100/readyz >/dev/null; do sleep 1; done'
inside journalctl -u lmwarden --no-pager -b | grep -E 'sessions restored|pinned=' | tail -2 | cut -c1-200
echo "try-unit: ok"
