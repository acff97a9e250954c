#!/usr/bin/env bash
# audit-service benchmark against a real broker (default: dev cluster B).
#
# 1. Throughput, per payload size (100 B and 1 KB by default): a 12-partition topic of
#    JSON messages of exactly that size is read alternately by a bare rdkafka consumer
#    built from the audit service's own consumer settings and by the audit service
#    (separate process, /metrics scraped), ROUNDS times in the same run, alternating
#    which goes first; same message count on both sides. Per round: rates, ratio, and
#    each side's process CPU per message (and per thread, on stderr) and how busy the
#    machine was (the broker shares the cores). The summary states this machine's
#    bare-consumer CPU per message, so figures from different machines compare. The bare
#    consumer reads no clock per message (every 4096, as the service reads it every 64).
#    It reads as most applications do, one poll per message; the service reads in
#    batches (audit-service/src/kafka/fetch.rs), so every round also runs a bare
#    consumer that reads exactly as the service does and counts nothing, and prints the
#    service's ratio and CPU to it: the counting's own price (BENCH_BARE_BATCH=0 skips it).
#    Targets: median throughput ratio >= 0.9 at both sizes, service CPU per
#    message <= 1.1x the bare consumer's at 100 B and <= 1.2x at 1 KB (medians).
# 2. Memory: TOPICS one-partition topics with late data spread over WINDOWS one-minute
#    windows per topic, audited by one instance; peak RSS (VmHWM) must stay <= 256 MB.
#    TOPICS=0 skips it.
#
# Usage: bench/audit-service.sh [MESSAGES] [ROUNDS] [TOPICS] [PER_TOPIC] [WINDOWS]
# MESSAGES is the 100-byte count; 1 KB runs MESSAGES/5. BENCH_SIZES overrides both,
# e.g. BENCH_SIZES=100:5000000,1024:1000000.
# Per side and round, stderr has the CPU per message of each thread (for a name shared by
# several threads, e.g. tokio's, also the busiest one: the service's consume loop).
# BENCH_COMPARE_BIN=/path/to/another/audit_bench (e.g. built from the previous commit)
# runs that build's service as a third side in every round, alternating with this
# build's: an A/B of two builds in one run, which a loaded machine cannot give across runs.
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
SIZES="${BENCH_SIZES:-100:$MESSAGES,1024:$((MESSAGES / 5))}"

echo "== throughput ($SIZES bytes:messages, $ROUNDS rounds, $BOOTSTRAP)"
"$BIN" throughput "$BOOTSTRAP" "$MESSAGES" "$ROUNDS" "$SIZES" 2> >(grep -v "durability check" >&2)
if [ "$TOPICS" -gt 0 ]; then
  echo "== memory ($TOPICS topics x $PER_TOPIC messages, $WINDOWS windows each)"
  "$BIN" rss "$BOOTSTRAP" "$TOPICS" "$PER_TOPIC" "$WINDOWS" 2> >(grep -v "durability check" >&2)
fi
"$BIN" cleanup "$BOOTSTRAP"
