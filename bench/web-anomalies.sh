#!/usr/bin/env bash
# Benchmark of GET /api/v1/anomalies over ~6 M window rows in PostgreSQL
# (7 days x 1000 topics x 3 tiers x 2 datacenters at 10-minute windows = 6 048 000).
#
#   bench/web-anomalies.sh                 # seed, start the server, load it with wrk
#   SEED=0 bench/web-anomalies.sh          # reuse the seeded database
#   DURATION=30s CONNECTIONS=16 bench/web-anomalies.sh
#
# Needs the dev PostgreSQL (deploy/dev/postgres start) and wrk (apt-get install wrk).
# The server is web/src/bin/web-bench-serve.rs (= `kafka-audit serve` without the Kafka parts)
# built in release mode in its own target dir, so the shared one stays unlocked.
# About 1 % of (topic, window, datacenter) lose 5 messages between regional and
# aggregate, so a 24 h range holds ~3 000 loss anomalies, a 1 h range ~120.
# Baseline in the same run: GET /healthz under the same load (HTTP + machine cost).
set -euo pipefail
cd "$(dirname "$0")/.."

PG=${PG:-postgres://postgres@127.0.0.1:55432}
DB=kafka_audit_bench
ADDR=127.0.0.1:18481
DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
TARGET=${BENCH_TARGET_DIR:-/tmp/kafka-audit-bench-target}
OUT=${OUT:-/tmp/kafka-audit-bench}
mkdir -p "$OUT"

CARGO_TARGET_DIR=$TARGET cargo build --release -p web --features bench-bins --bin web-bench-serve --bin web-bench-seed
BIN=$TARGET/release

now_ms=$(( $(date +%s) * 1000 ))
last=$(( (now_ms - 40 * 60000) / 600000 * 600000 ))
first=$(( last - (7 * 144 - 1) * 600000 ))

if [ "$SEED" = 1 ]; then
    psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
    "$BIN/web-bench-seed" "$PG/$DB" 0
    start=$(date +%s.%N)
    psql "$PG/$DB" -v ON_ERROR_STOP=1 -q <<SQL
SELECT audit_ensure_day_partitions($first, $now_ms + 86400000);
INSERT INTO audit_window (topic, tier, datacenter, window_start_ms, window_end_ms, count, bytes,
    no_time_count, malformed_count, out_of_bounds_count, checksum, latency_zero_count,
    latency_negative_count, latency_max_ms, increments, first_received_at_ms, last_received_at_ms)
SELECT format('topic-%s', lpad(t::text, 4, '0')), tier, dc, w, w + 600000,
       c, c * 120, 0, 0, 0, c * 1000003, 0, 0, 2100, 1,
       LEAST(w + 660000, $now_ms), LEAST(w + 660000, $now_ms)
FROM generate_series(0, 999) t,
     generate_series($first::bigint, $last::bigint, 600000) w,
     unnest(ARRAY['producer', 'regional', 'aggregate']) tier,
     unnest(ARRAY['dc1', 'dc2']) dc,
     LATERAL (SELECT (1000 + (t * 31 + w / 600000) % 500)
                     - CASE WHEN tier = 'aggregate' AND (t * 7919 + w / 600000 + length(dc)) % 97 = 0
                            THEN 5 ELSE 0 END AS c) x;
INSERT INTO audit_window_bucket (topic, window_start_ms, window_id, bucket, count)
SELECT topic, window_start_ms, id, 230, count FROM audit_window;
INSERT INTO audit_progress (topic, tier, datacenter, partition_id, host, next_offset, record_time_ms,
    lag, emitted_at_ms, received_at_ms)
SELECT format('topic-%s', lpad(t::text, 4, '0')), tier, dc, 0, tier || '-' || dc, 1000000, $now_ms, 0,
       $now_ms, $now_ms
FROM generate_series(0, 999) t, unnest(ARRAY['regional', 'aggregate']) tier, unnest(ARRAY['dc1', 'dc2']) dc;
ANALYZE;
SQL
    echo "seeded in $(echo "$(date +%s.%N) - $start" | bc) s"
fi
psql "$PG/$DB" -Atc "SELECT 'window rows: ' || count(*) FROM audit_window"

"$BIN/web-bench-serve" bench/web-anomalies.toml 2>"$OUT/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
start=$(date +%s.%N)
until curl -fsS "http://$ADDR/readyz" >/dev/null 2>&1; do
    kill -0 $SERVER 2>/dev/null || { tail -20 "$OUT/server.log"; exit 1; }
    sleep 0.5
    if [ "$(echo "$(date +%s.%N) - $start > 1800" | bc)" = 1 ]; then echo "not ready after 30 min"; exit 1; fi
done
echo "first evaluation of the 7-day horizon done in $(echo "$(date +%s.%N) - $start" | bc) s (ready)"
echo "server RSS: $(ps -o rss= -p $SERVER) KB"

to=$(( last + 600000 ))
run() {
    local name=$1 url=$2
    curl -fsS "$url" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("  '"$name"': total", d.get("total"), "page", len(d.get("anomalies", [])), "bytes", len(json.dumps(d)))' 2>/dev/null || true
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$url" | tee "$OUT/wrk-$name.txt" |
        grep -E "Latency|50%|90%|99%|Requests/sec|Non-2xx|Socket errors" | sed "s/^/  $name: /"
}
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION"
run healthz "http://$ADDR/healthz"
run anomalies-1h "http://$ADDR/api/v1/anomalies?from=$(( to - 3600000 ))&to=$to"
run anomalies-24h "http://$ADDR/api/v1/anomalies?from=$(( to - 86400000 ))&to=$to"
run anomalies-24h-page1000 "http://$ADDR/api/v1/anomalies?from=$(( to - 86400000 ))&to=$to&page_size=1000"
run anomalies-24h-loss-page20 "http://$ADDR/api/v1/anomalies?from=$(( to - 86400000 ))&to=$to&kind=loss&page=20"
echo "evaluation cycles (the job kept running during the load):"
curl -fsS "http://$ADDR/metrics" | grep -E "^kafka_audit_(evaluation_duration_seconds_(sum|count)|evaluated_windows_total|anomalies\{)" | sed 's/^/  /'
