#!/usr/bin/env bash
# audit-service benchmark against a real broker (default: dev cluster B).
#
# 1. Throughput: a 12-partition topic of ~100-byte JSON messages is read alternately
#    by a bare rdkafka consumer built from the audit service's own consumer settings
#    and by the audit service (separate process, /metrics scraped), ROUNDS times in
#    the same run, alternating which goes first. Target: audit / bare >= 0.9 (median of
#    the rounds). Each side also reports its process CPU per message and how busy the
#    machine was (the broker shares the cores).
# 2. Memory: TOPICS one-partition topics with late data spread over WINDOWS one-minute
#    windows per topic, audited by one instance; peak RSS (VmHWM) must stay <= 256 MB.
#
# Usage: bench/audit-service.sh [MESSAGES] [ROUNDS] [TOPICS] [PER_TOPIC] [WINDOWS]
# BENCH_KAFKA_EXTRA adds lines to both sides' [kafka] config (';' separates lines), to
# compare librdkafka settings, e.g.
#   BENCH_KAFKA_EXTRA='[kafka.consumer];"fetch.queue.backoff.ms" = "1000"' bench/audit-service.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BOOTSTRAP="${KAFKA_AUDIT_BENCH_KAFKA:-${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:29092}}"
MESSAGES="${1:-10000000}"
ROUNDS="${2:-5}"
TOPICS="${3:-2000}"
PER_TOPIC="${4:-200}"
WINDOWS="${5:-60}"

cargo build --release -p audit-service --example audit_bench
BIN=target/release/examples/audit_bench

echo "== throughput ($MESSAGES messages, $ROUNDS rounds, $BOOTSTRAP)"
"$BIN" throughput "$BOOTSTRAP" "$MESSAGES" "$ROUNDS" 2> >(grep -v "durability check" >&2)
echo "== memory ($TOPICS topics x $PER_TOPIC messages, $WINDOWS windows each)"
"$BIN" rss "$BOOTSTRAP" "$TOPICS" "$PER_TOPIC" "$WINDOWS" 2> >(grep -v "durability check" >&2)
"$BIN" cleanup "$BOOTSTRAP"
