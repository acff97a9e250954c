#!/usr/bin/env bash
# The producer tier's cost against a real broker (default: dev cluster B): a Kafka
# producer with audit-lib embedded (Aggregator on the sending thread, increments sent
# by a publishing thread through SpoolingSink + KafkaSink) against the same producer
# without it, in the same run (audit-lib/examples/producer_bench/).
#
# 1. compare: ROUNDS rounds, alternating which side goes first; per round each side
#    sends MESSAGES messages of SIZE bytes as fast as the producer takes them (rate =
#    messages / time to the last delivery report), then RATE msg/s for SECONDS
#    seconds (p50/p99/p99.9 of send -> delivery report). Same producer settings and
#    message count on both sides. Targets: throughput >= 0.95x the bare producer;
#    the p99 latency added is stated.
# 2. outage: the audited producer with its audit cluster unreachable (a closed local
#    port) for OUTAGE_SECONDS at RATE msg/s: process RSS every second, spool size and
#    reports that waited. Memory must stay flat.
#
# Usage: bench/producer-tier.sh [MESSAGES] [ROUNDS] [RATE] [SECONDS] [SIZE] [OUTAGE_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."

BOOTSTRAP="${KAFKA_AUDIT_BENCH_KAFKA:-${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:29092}}"
MESSAGES="${1:-2000000}"
ROUNDS="${2:-5}"
RATE="${3:-20000}"
SECONDS_="${4:-10}"
SIZE="${5:-100}"
OUTAGE="${6:-60}"

cargo build --release -p audit-lib --example producer_bench
BIN=target/release/examples/producer_bench

echo "== producer tier vs bare producer ($MESSAGES x $SIZE B, $ROUNDS rounds, latency at $RATE msg/s for ${SECONDS_}s, $BOOTSTRAP)"
"$BIN" compare "$BOOTSTRAP" "$MESSAGES" "$ROUNDS" "$RATE" "$SECONDS_" "$SIZE"
if [ "$OUTAGE" -gt 0 ]; then
  echo "== audit cluster unreachable for ${OUTAGE}s at $RATE msg/s"
  "$BIN" outage "$BOOTSTRAP" "$RATE" "$OUTAGE" "$SIZE" 2> >(grep -v "Connect to ipv4" >&2)
fi
