#!/usr/bin/env bash
# First-seen increments/s into PostgreSQL through the store (deduplication + roll-up),
# against a raw binary COPY of the same rows into the same table, in the same run.
# Needs PostgreSQL from deploy/dev (started here if not running).
#   bench/collector-store.sh [--increments N] [--batch B] [--buckets K] [--topics T] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/dev/postgres start >/dev/null
# Build first, then run the binary directly: cargo would hold the target-dir lock
# for the whole run.
exe=$(cargo bench -p store --bench collector_store --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*collector_store[^"]*"' | tail -1 | cut -d'"' -f4)
if [[ -z "$exe" ]]; then
  echo "build of the benchmark failed:" >&2
  cargo bench -p store --bench collector_store --no-run >&2
  exit 1
fi
exec "$exe" --bench "$@"
