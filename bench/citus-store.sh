#!/usr/bin/env bash
# The collector's store path into Citus against one PostgreSQL on the same machine, in
# the same run: store/benches/collector_store.rs alternately into a fresh database on
# the dev PostgreSQL (deploy/dev/postgres) and a fresh database on the Citus cluster of
# deploy/dev/citus (distributed with deploy/citus/distribute.sql), RUNS times each, one
# round a run. Prints each run's lines and, per measure, the medians and their ratio
# Citus / PostgreSQL. "probe" is the UUID deduplication probe alone of a batch whose
# messages are all stored (PgStore::known_messages); "replay" stages such a batch
# whole (probe, emitters, commit). On Citus the probe is also timed as it was before
# it was routed (one query to every shard, PgStore::unrouted), on the same rows.
# "partition upkeep" is the collector's first prepare_partitions on the fresh store
# (30 days back, 7 ahead: 38 days of four tables, one day per transaction).
#   KAFKA_AUDIT_CITUS_PG_CONFIG=... bench/citus-store.sh [RUNS] [collector_store args...]
# Default workload: 100 000 increments in batches of 10 000 (--increments, --batch ...).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
(($# > 0)) && shift
args=(--increments 100000 --batch 10000 "$@")
deploy/dev/postgres start >/dev/null
deploy/dev/citus start >/dev/null
export KAFKA_AUDIT_TEST_CITUS_URL=${KAFKA_AUDIT_TEST_CITUS_URL:-$(deploy/dev/citus url)}
exe=$(cargo bench -p store --bench collector_store --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*collector_store[^"]*"' | tail -1 | cut -d'"' -f4)
[[ -n $exe ]] || { cargo bench -p store --bench collector_store --no-run >&2; exit 1; }
echo "citus: $(deploy/dev/citus psql -tAc 'SELECT citus_version()' | cut -d' ' -f1-2), $(deploy/dev/citus psql -tAc 'SELECT count(*) FROM pg_dist_node WHERE groupid > 0') workers; postgres: $(deploy/dev/postgres psql -tAc 'SHOW server_version')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
log=$(mktemp)
for ((r = 1; r <= runs; r++)); do
  for target in postgres citus; do
    extra=()
    [[ $target == citus ]] && extra=(--citus)
    # `targets` fails the PostgreSQL run when missed; the figures are still wanted.
    out=$("$exe" --bench "${args[@]}" --rounds 1 "${extra[@]}" || true)
    upkeep=$(grep '^partition upkeep:' <<<"$out" || true)
    line="$(grep '^round 1:' <<<"$out" || true) | ${upkeep#partition }"
    echo "run $r $target: ${line#round 1: }"
    echo "$target $line" >>"$log"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Medians per target of: stage_batch/s, raw COPY rows/s, probe and replay s per batch,
# roll-up/s, partition upkeep s.
awk '
  function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    t = $1; n[t]++
    match($0, /stage_batch +[0-9]+/); s[t, n[t]] = substr($0, RSTART + 12, RLENGTH - 12) + 0
    match($0, /raw COPY +[0-9]+/); c[t, n[t]] = substr($0, RSTART + 9, RLENGTH - 9) + 0
    match($0, /\([0-9.]+ s per batch/); r[t, n[t]] = substr($0, RSTART + 1, RLENGTH - 13) + 0
    match($0, /\| probe [0-9.]+ s/); p[t, n[t]] = substr($0, RSTART + 8, RLENGTH - 10) + 0
    if (match($0, /to every shard [0-9.]+ s/)) { f[n[t]] = substr($0, RSTART + 15, RLENGTH - 17) + 0; nf = n[t] }
    match($0, /roll-up +[0-9]+/); u[t, n[t]] = substr($0, RSTART + 8, RLENGTH - 8) + 0
    match($0, /\) in [0-9.]+ s$/); k[t, n[t]] = substr($0, RSTART + 5, RLENGTH - 7) + 0
    match($0, /upkeep: [0-9]+ partitions/); kp[t] = substr($0, RSTART + 8, RLENGTH - 19) + 0
  }
  END {
    for (t in n) {
      for (i = 1; i <= n[t]; i++) { a1[i] = s[t, i]; a2[i] = c[t, i]; a3[i] = p[t, i]; a4[i] = u[t, i]; a5[i] = r[t, i]; a7[i] = k[t, i] }
      S[t] = median(a1, n[t]); C[t] = median(a2, n[t]); P[t] = median(a3, n[t]); U[t] = median(a4, n[t]); R[t] = median(a5, n[t]); K[t] = median(a7, n[t])
      printf "median %-8s stage_batch %8.0f increments/s | raw COPY %8.0f rows/s | probe %.3f s per batch | replay %.3f s per batch | roll-up %8.0f increments/s | partition upkeep %d partitions in %.2f s\n", t, S[t], C[t], P[t], R[t], U[t], kp[t], K[t]
    }
    if (nf) {
      for (i = 1; i <= nf; i++) a6[i] = f[i]
      F = median(a6, nf)
      printf "median citus    probe to every shard (as before #32) %.3f s per batch: routed / every shard %.2f\n", F, P["citus"] / F
    }
    if (("postgres" in n) && ("citus" in n))
      printf "citus / postgres: stage_batch %.3f | raw COPY %.3f | probe time %.2f | replay time %.2f | roll-up %.3f | partition upkeep time %.1f\n",
        S["citus"] / S["postgres"], C["citus"] / C["postgres"], P["citus"] / P["postgres"], R["citus"] / R["postgres"], U["citus"] / U["postgres"], K["citus"] / K["postgres"]
  }' "$log"
rm -f "$log"
