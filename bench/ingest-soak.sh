#!/usr/bin/env bash
# Ingest soak: a real `kafka-audit collect` on a fresh PostgreSQL database,
# fed for 60 s by 8 connections with valid and hostile requests (overflowing counts,
# NUL bytes, far-future times, messages outside the token's binding, label-breaking
# names, unaligned windows, 8 MiB bombs, 100 001-partition progress, no token, wrong
# content type, broken JSON). Passes when the collector logged no panic, every valid
# increment is in its window row exactly once (against the ground truth the load
# generator kept), its peak RSS (VmHWM) stayed under the bound, and the roll-up gauge
# is back to 1. Needs PostgreSQL from deploy/dev (started here if not running).
#   bench/ingest-soak.sh [--release] [--seconds 60] [--connections 8] [--rss-bound-mib 256]
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/dev/postgres start >/dev/null
profile=()
if [[ "${1:-}" == "--release" ]]; then
  profile=(--release)
  shift
fi
# Build first, then run the binaries directly: cargo would hold the target-dir lock.
cargo build "${profile[@]}" --bin kafka-audit >&2
exe=$(cargo build "${profile[@]}" -p collector --bench ingest_soak --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*ingest_soak[^"]*"' | tail -1 | cut -d'"' -f4)
if [[ -z "$exe" ]]; then
  echo "build of the soak failed:" >&2
  cargo build "${profile[@]}" -p collector --bench ingest_soak >&2
  exit 1
fi
dir=debug
[[ ${#profile[@]} -gt 0 ]] && dir=release
exec "$exe" --collector "target/$dir/kafka-audit" "$@"
