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
ADDR=127.0.0.1:18481  # (the listen address of bench/web-anomalies.toml)
DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
TARGET=${BENCH_TARGET_DIR:-/tmp/kafka-audit-bench-target}
OUT=${OUT:-/tmp/kafka-audit-bench}
mkdir -p "$OUT"

. bench/web-lib.sh
build_web_bench
seed_times 7
last=$LAST

if [ "$SEED" = 1 ]; then
    seed_windows "$PG" "$DB" 1000
fi
psql "$PG/$DB" -Atc "SELECT 'window rows: ' || count(*) FROM audit_window"

start_serve bench/web-anomalies.toml "$ADDR"
trap stop_serve EXIT
ready=$(wait_ready "http://$ADDR/readyz")
echo "ready (recent windows evaluated) in $ready s"
echo "whole 7-day horizon evaluated in $(wait_loaded "http://$ADDR/readyz") s"
echo "server RSS: $(ps -o rss= -p $SERVER) KB"

to=$(( last + 600000 ))
run() { wrk_run "$@"; }
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION"
run healthz "http://$ADDR/healthz"
run anomalies-1h "http://$ADDR/api/v1/anomalies?from=$(( to - 3600000 ))&to=$to"
run anomalies-24h "http://$ADDR/api/v1/anomalies?from=$(( to - 86400000 ))&to=$to"
run anomalies-24h-page1000 "http://$ADDR/api/v1/anomalies?from=$(( to - 86400000 ))&to=$to&page_size=1000"
run anomalies-24h-loss-page20 "http://$ADDR/api/v1/anomalies?from=$(( to - 86400000 ))&to=$to&kind=loss&page=20"
echo "evaluation cycles (the job kept running during the load):"
curl -fsS "http://$ADDR/metrics" | grep -E "^kafka_audit_(evaluation_duration_seconds_(sum|count)|evaluated_windows_total|anomalies\{)" | sed 's/^/  /'
