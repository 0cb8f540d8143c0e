#!/usr/bin/env bash
# Checks that the committed bpf2go output is what `go generate ./bpf`
# builds from the committed C: it regenerates into a temporary copy and
# compares. Skipped where clang is not installed (then `go build` uses the
# committed output as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang >/dev/null; then
	echo "bpf: clang not installed; not checking the generated output"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r bpf go.mod go.sum "$tmp"/
(cd "$tmp" && go generate ./bpf/ >/dev/null)
for f in bpf/lmwarden_bpfel.o bpf/lmwarden_bpfel.go; do
	if ! cmp -s "$f" "$tmp/$f"; then
		echo "bpf: $f differs from what go generate ./bpf builds; run make generate and commit it" >&2
		exit 1
	fi
done
echo "bpf: generated output matches the C"
